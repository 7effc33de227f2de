"""The SSRF guard for the web tools, and a GET that goes through it on every hop.

A URL the model hands us is resolved first; every address it resolves to must be public (or in
`tools.web.allowed_networks`, or `allow_private` is on), and the connection goes to the address
that was checked (the hostname is kept for the Host header and TLS), so a DNS answer that
changes between the check and the connect cannot slip a private address in. Redirects are
followed by hand, each one checked the same way.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

from tools.errors import ToolError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


# Prefixes that reach an IPv4 (or site-local) address through a translator or a tunnel:
# NAT64's local-use prefix and the IPv4-compatible block. Python's `is_global` calls them
# global, and a router would carry a request to 64:ff9b:1::a00:1 on to 10.0.0.1.
_TRANSLATING_V6 = (
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::/96"),
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries to its translator: NAT64's well-known
    prefix, 6to4, Teredo's client; the guard checks it as if it were the address."""
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


class SsrfGuard:
    """Decides which addresses the web tools may reach."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        allowed_networks: Iterable[str] = (),
        trusted_hosts: Iterable[str] = (),
        resolver: Resolver = system_resolver,
    ) -> None:
        self.allow_private = allow_private
        self.networks = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]
        self.trusted_hosts = {h.lower() for h in trusted_hosts if h}
        self.resolver = resolver

    def address_allowed(self, address: str) -> bool:
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self.networks):
            return True
        if ip.is_multicast or ip.is_unspecified:
            return False
        if self.allow_private:
            return True
        if isinstance(ip, ipaddress.IPv6Address):
            if any(ip in net for net in _TRANSLATING_V6):
                return False
            inner = embedded_ipv4(ip)
            if inner is not None and not self.address_allowed(str(inner)):
                return False
        return ip.is_global

    def pin(self, url: httpx.URL) -> str:
        """The checked address to connect to for ``url``; `ToolError` when refused."""
        if url.scheme not in ("http", "https"):
            raise ToolError(f"only http and https URLs can be fetched, not {url.scheme or '?'}:")
        host = url.host
        if not host:
            raise ToolError(f"URL {str(url)[:200]!r} has no host")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise ToolError(f"cannot resolve {host!r}: {exc}") from None
        if not addresses:
            raise ToolError(f"cannot resolve {host!r}")
        if host.lower() in self.trusted_hosts:
            return addresses[0]
        refused = [a for a in addresses if not self.address_allowed(a)]
        if refused:
            raise ToolError(
                f"refused: {host} resolves to a private, loopback or link-local address "
                f"({refused[0]}); only public addresses may be fetched"
            )
        return addresses[0]


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # after redirects
    status: int
    content_type: str
    body: bytes
    truncated: bool


def guarded_get(
    client: httpx.Client,
    url: str,
    guard: SsrfGuard,
    *,
    max_bytes: int,
    timeout_s: float,
    max_redirects: int = 5,
    should_stop: Callable[[], bool] = lambda: False,
    headers: dict[str, str] | None = None,
) -> Fetched:
    """GET ``url`` with every hop checked by ``guard``; at most ``max_bytes`` of the body."""
    try:
        current = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError) as exc:
        raise ToolError(f"invalid URL {url[:200]!r}: {exc}") from None
    deadline = time.monotonic() + timeout_s
    for _hop in range(max_redirects + 1):
        response = _send_pinned(client, current, guard, headers or {}, timeout_s)
        try:
            if response.is_redirect and "location" in response.headers:
                current = httpx.URL(urljoin(str(current), response.headers["location"]))
                continue
            body, truncated = _read_capped(response, max_bytes, deadline, should_stop)
            return Fetched(
                str(current),
                response.status_code,
                response.headers.get("content-type", ""),
                body,
                truncated,
            )
        finally:
            response.close()
    raise ToolError(f"too many redirects (more than {max_redirects})")


def _send_pinned(
    client: httpx.Client,
    url: httpx.URL,
    guard: SsrfGuard,
    headers: dict[str, str],
    timeout_s: float,
) -> httpx.Response:
    address = guard.pin(url)
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    pinned = url.copy_with(host=address)
    host_header = url.netloc.decode("ascii")
    request = client.build_request(
        "GET",
        pinned,
        headers={**headers, "Host": host_header},
        extensions=extensions,
        timeout=httpx.Timeout(timeout_s),
    )
    try:
        return client.send(request, stream=True, follow_redirects=False)
    except httpx.TimeoutException:
        raise ToolError(f"{url.host} did not answer within {timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise ToolError(f"cannot fetch {url.host}: {type(exc).__name__}: {exc}") from None


def _read_capped(
    response: httpx.Response, max_bytes: int, deadline: float, should_stop: Callable[[], bool]
) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():  # decoded: a gzip bomb is capped by what it yields
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"".join(chunks)[:max_bytes], True
            if time.monotonic() > deadline:
                raise ToolError("the page took too long to download")
            if should_stop():
                raise ToolError("interrupted by the user")
    except httpx.HTTPError as exc:
        raise ToolError(f"download failed: {type(exc).__name__}: {exc}") from None
    return b"".join(chunks), False
