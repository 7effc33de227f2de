"""Instances of a cluster calling each other over HTTP: each publishes where its control server
is, they share a secret kept in the coordination store, and every call is signed with it (an
HMAC over sender, receiver, time, path and body), so only a peer can make one, a call cannot be
redirected to another instance, and the secret never crosses the wire."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import structlog

from hermes_gateway.cluster.lease import Coordinator
from hermes_gateway.errors import CoordinationUnavailable, PeerUnreachable, RequestError

log = structlog.get_logger("hermes.cluster")
SECRET = "peer-secret"  # the coordination store's setting every instance signs with
SENDER = "X-Hermes-Peer"
SENT_AT = "X-Hermes-Peer-Time"
SIGNATURE = "X-Hermes-Peer-Signature"
SKEW_S = 60.0  # a signed call older or newer than this is refused (a replay, or a bad clock)
MAX_LINE = 16 * 1024 * 1024  # one JSON line of an answer (a whole reply's text)
_WILDCARDS = ("", "0.0.0.0", "::")


def peer_address(host: str, port: int) -> str:
    """The URL other instances reach a control server bound to ``host``:``port`` at, when
    `cluster.peer_url` does not say: a wildcard bind is reached by this host's name."""
    name = socket.gethostname() if host in _WILDCARDS else host
    return f"http://[{name}]:{port}" if ":" in name else f"http://{name}:{port}"


class PeerLink:
    """This instance's side: its address and the secret kept fresh in the coordination store
    (every third of a lease, like the heartbeat), calls out, and the check of calls in."""

    def __init__(self, coordinator: Coordinator, url: Callable[[], str]) -> None:
        self.coordinator = coordinator
        self._url = url  # read when published: the control port is known once it listens
        self._secret: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None

    @property
    def me(self) -> str:
        return self.coordinator.instance_id

    async def start(self) -> None:
        with contextlib.suppress(CoordinationUnavailable):  # the loop keeps trying
            await self._publish()
        self._task = asyncio.create_task(self._keep(), name="cluster-peers")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.coordinator.lease_s / 3)
            try:
                await self._publish()
            except CoordinationUnavailable as exc:
                log.debug("cluster.peer_publish_waits", error=str(exc))
            except Exception:
                log.exception("cluster.peer_publish_failed")

    async def _publish(self) -> None:
        """The cluster's secret (the first instance's; a Redis that lost it gets ours back)
        and this instance's address, both dropped three leases after the last instance goes."""
        keep = 3 * self.coordinator.lease_s
        mine = self._secret or secrets.token_urlsafe(32)
        self._secret = await self.coordinator.settle(SECRET, mine, keep)
        await self.coordinator.note(f"peer:{self.me}", {"url": self._url()}, keep)

    # -- signing --------------------------------------------------------------------------

    def _sign(self, secret: str, sender: str, to: str, sent_at: str, path: str, body: bytes) -> str:
        head = "\n".join((sender, to, sent_at, path)).encode()
        return hmac.new(secret.encode(), head + b"\n" + body, hashlib.sha256).hexdigest()

    def verify(self, headers: Mapping[str, str], path: str, body: bytes) -> str:
        """The instance that sent this call to this one; `RequestError` 401 unless it is signed
        with the cluster's secret, for this instance, within `SKEW_S` of now."""
        if self._secret is None:
            raise RequestError(503, "this instance has not read the cluster's secret yet", "busy")
        sender, sent_at = headers.get(SENDER, ""), headers.get(SENT_AT, "")
        try:
            fresh = abs(time.time() - float(sent_at)) <= SKEW_S
        except ValueError:
            fresh = False
        given = headers.get(SIGNATURE, "")
        wanted = self._sign(self._secret, sender, self.me, sent_at, path, body)
        if not (sender and fresh and hmac.compare_digest(given.encode(), wanted.encode())):
            raise RequestError(
                401, "not a signed call from an instance of this cluster", "unauthorized"
            )
        return sender

    # -- calling --------------------------------------------------------------------------

    async def _address(self, to: str) -> str:
        try:
            url = (await self.coordinator.notes(f"peer:{to}")).get("url", "")
        except CoordinationUnavailable as exc:
            raise PeerUnreachable(f"cannot look {to} up: {exc}") from exc
        if not url.startswith(("http://", "https://")):
            raise PeerUnreachable(
                f"{to} has published no address (it does not serve the local API)"
            )
        return url.rstrip("/")

    async def call(
        self, to: str, path: str, body: Mapping[str, Any], read_s: float
    ) -> AsyncGenerator[dict[str, Any], None]:
        """POST ``body`` to ``path`` on instance ``to``, signed; yields each JSON line of its
        answer as it comes. `PeerUnreachable` when it cannot be reached, refuses, or sends
        nothing for ``read_s``."""
        if self._secret is None:
            raise PeerUnreachable("this instance has not read the cluster's secret yet")
        url = await self._address(to)
        raw = json.dumps(dict(body)).encode()
        sent_at = f"{time.time():.3f}"
        headers = {
            SENDER: self.me,
            SENT_AT: sent_at,
            SIGNATURE: self._sign(self._secret, self.me, to, sent_at, path, raw),
            "Content-Type": "application/json",
        }
        connect_s = max(1.0, self.coordinator.lease_s / 3)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_s, sock_read=read_s)
        try:
            async with self._client().post(
                url + path, data=raw, headers=headers, timeout=timeout
            ) as response:
                if response.status != 200:
                    said = (await response.text())[:300]
                    raise PeerUnreachable(f"{to} at {url} answered {response.status}: {said}")
                async for line in _lines(response):
                    yield json.loads(line)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise PeerUnreachable(f"{to} at {url}: {type(exc).__name__}: {exc}") from exc

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(trust_env=False)  # peers are never proxied
        return self._http


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The answer's lines, each whole however the bytes were split on the way."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
        if len(buffer) > MAX_LINE:
            raise ValueError(f"a line of the answer is over {MAX_LINE} bytes")
    if buffer.strip():
        yield buffer
