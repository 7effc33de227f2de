"""Who may see the dashboard: whoever proved the control token once (in the login form, or
through a one-time link `hermes dashboard` prints) and holds the session cookie; without a
configured `control.token` (the generated one) also only loopback clients addressing a loopback
host. And the CSRF check every action (a POST) passes, and whether the browser will keep the
Secure session cookie at all (`cookie_dropped`)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web

COOKIE = "hermes_dashboard"
SESSION_S = 12 * 3600.0
LINK_S = 600.0  # how long a one-time login link waits to be opened
_LINKS_MAX = 16  # links not yet opened; a new one pushes out the oldest
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
_FAILURES_PER_MINUTE = 10  # wrong tokens in the login form, all clients together


def _is_loopback(address: str | None) -> bool:
    if not address:
        return False
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _host_name(request: web.Request) -> str:
    host = request.host
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Auth:
    """Stateless sessions: the cookie is an HMAC of its issue time under the token, so a
    restart keeps them and a new token ends them. CSRF tokens are per process and handed to
    each page again whenever its event stream (re)connects. One-time links live in this
    process only (a restart voids the unopened ones).

    ``token`` gives the control token (read at start, so asked for at each use);
    ``loopback_only``: no `control.token` is configured, which is only allowed on a loopback
    bind, so a client from elsewhere (a proxy) or naming another host is refused;
    ``secure_cookie``: the session cookie is Secure (unless `dashboard.insecure_cookie`);
    ``trust_forwarded_proto``: a proxy's `X-Forwarded-Proto: https` says the browser is on
    HTTPS (only when the operator says a proxy stands in front)."""

    def __init__(
        self,
        token: Callable[[], str],
        *,
        loopback_only: bool,
        secure_cookie: bool = True,
        trust_forwarded_proto: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._token = token
        self.loopback_only = loopback_only
        self.secure_cookie = secure_cookie
        self.trust_forwarded_proto = trust_forwarded_proto
        self._secret = secrets.token_bytes(32)
        self._clock = clock
        self._failures: list[float] = []
        self._links: dict[str, float] = {}  # sha256 of a link's secret -> when it expires

    def reachable(self, request: web.Request) -> bool:
        """May this client reach the dashboard at all (before any login)? A Host header that
        is not loopback is a DNS-rebinding page in a browser."""
        if not self.loopback_only:
            return True
        return _is_loopback(request.remote) and _host_name(request) in _LOOPBACK_NAMES

    def cookie_dropped(self, request: web.Request) -> bool:
        """Will the browser drop the session cookie? It keeps a Secure cookie only over HTTPS
        or from a loopback host name (browsers count http://localhost as secure), so a login
        over plain HTTP to a LAN address would silently land on the form again."""
        if not self.secure_cookie or request.secure:
            return False
        forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        if self.trust_forwarded_proto and forwarded == "https":
            return False
        return _host_name(request) not in _LOOPBACK_NAMES

    def allowed(self, request: web.Request) -> bool:
        """May this request see the dashboard: a reachable client with a valid session?"""
        return self.reachable(request) and self._session_ok(request.cookies.get(COOKIE, ""))

    def _now(self) -> float:
        return self._clock()

    def _sign(self, what: str) -> str:
        return hmac.new(self._token().encode(), what.encode(), hashlib.sha256).hexdigest()

    def _session_ok(self, cookie: str) -> bool:
        issued, _, mac = cookie.partition(".")
        if not issued.isdigit() or not hmac.compare_digest(mac, self._sign(f"session:{issued}")):
            return False
        return 0 <= self._now() - int(issued) <= SESSION_S

    def login(self, given: str) -> str | None:
        """The session cookie's value for the right token; None otherwise (and when too many
        wrong ones came in the last minute)."""
        now = self._now()
        self._failures = [t for t in self._failures if now - t < 60]
        if len(self._failures) >= _FAILURES_PER_MINUTE:
            return None
        if not hmac.compare_digest(given.encode(), self._token().encode()):
            self._failures.append(now)
            return None
        return self._session()

    def _session(self) -> str:
        issued = str(int(self._now()))
        return f"{issued}.{self._sign(f'session:{issued}')}"

    def new_link(self) -> str:
        """The secret of a one-time login link (for whoever proved the token to the control
        API): opened once within `LINK_S`, it gives a session; then it is spent."""
        now = self._now()
        self._links = {k: t for k, t in self._links.items() if t > now}
        while len(self._links) >= _LINKS_MAX:
            del self._links[min(self._links, key=self._links.__getitem__)]
        secret = secrets.token_urlsafe(32)
        self._links[_digest(secret)] = now + LINK_S
        return secret

    def redeem(self, secret: str) -> str | None:
        """The session cookie's value for a link's secret not yet used nor expired; None
        otherwise. Kept by digest, so the lookup's timing says nothing about the secret."""
        expires = self._links.pop(_digest(secret), None)
        if expires is None or expires <= self._now():
            return None
        return self._session()

    def set_cookie(self, response: web.StreamResponse, value: str) -> None:
        response.set_cookie(
            COOKIE,
            value,
            max_age=int(SESSION_S),
            path="/dashboard",
            secure=self.secure_cookie,
            httponly=True,
            samesite="Strict",
        )

    def csrf(self, request: web.Request) -> str:
        """The CSRF token of this client: bound to its session cookie when there is one."""
        material = hmac.new(self._secret, b"csrf", hashlib.sha256).hexdigest()
        return hmac.new(
            self._secret, f"{material}:{request.cookies.get(COOKIE, '')}".encode(), hashlib.sha256
        ).hexdigest()

    def csrf_ok(self, request: web.Request, given: str) -> bool:
        """A POST is ours if it carries the page's CSRF token and, when the browser says where
        it comes from, comes from this origin."""
        origin = request.headers.get("Origin")
        # the host only: behind a TLS proxy the scheme the browser used is not ours
        if origin is not None and urlsplit(origin).netloc != request.host:
            return False
        return bool(given) and hmac.compare_digest(given, self.csrf(request))


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
