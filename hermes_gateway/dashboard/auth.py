"""Who may see the dashboard: the control API's rule (no token: loopback clients only; with
`control.token`: whoever proved it once in the login form and holds the session cookie), and
the CSRF check every action (a POST) passes."""

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
    each page again whenever its event stream (re)connects."""

    def __init__(self, token: str | None, clock: Callable[[], float] = time.time) -> None:
        self.token = token or None
        self._secret = secrets.token_bytes(32)
        self._clock = clock
        self._failures: list[float] = []

    @property
    def needs_login(self) -> bool:
        return self.token is not None

    def allowed(self, request: web.Request) -> bool:
        """May this request see the dashboard at all?"""
        if self.token is None:
            # no token is only ever configured on a loopback address: refuse anything else,
            # and a Host header that is not loopback (a DNS-rebinding page in a browser)
            return _is_loopback(request.remote) and _host_name(request) in _LOOPBACK_NAMES
        return self._session_ok(request.cookies.get(COOKIE, ""))

    def _now(self) -> float:
        return self._clock()

    def _sign(self, what: str) -> str:
        key = (self.token or "").encode() if self.token else self._secret
        return hmac.new(key, what.encode(), hashlib.sha256).hexdigest()

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
        if self.token is None or len(self._failures) >= _FAILURES_PER_MINUTE:
            return None
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            self._failures.append(now)
            return None
        issued = str(int(now))
        return f"{issued}.{self._sign(f'session:{issued}')}"

    def set_cookie(self, response: web.StreamResponse, value: str) -> None:
        response.set_cookie(
            COOKIE,
            value,
            max_age=int(SESSION_S),
            path="/dashboard",
            secure=True,
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
