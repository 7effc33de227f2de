"""Calls between a cluster's instances (`PeerLink`): only a call signed with the cluster's
secret, for the instance it reaches, recently and over exactly this body is taken; the
address called is the one the instance published, never one a client could name."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hermes_gateway.cluster.local import LocalCoordinator, LocalHub
from hermes_gateway.cluster.peers import SENDER, SENT_AT, SIGNATURE, PeerLink
from hermes_gateway.errors import PeerUnreachable, RequestError

PATH = "/cluster/v1/chat"


# a call's connect timeout is a third of the lease (at least 1 s): long enough here that a
# loopback connect on a loaded test machine is never taken for an unreachable peer
LEASE_S = 30.0


class Peer:
    """An instance's control server with one route that checks its callers as the local
    API's carry route does, and answers two JSON lines; it keeps the last call it took."""

    def __init__(self, link: PeerLink) -> None:
        self.link = link
        self.seen: list[tuple[dict[str, str], bytes]] = []
        app = web.Application()
        app.router.add_post(PATH, self.handle)
        self.runner = web.AppRunner(app)
        self.url = ""

    async def start(self) -> None:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.seen.append((dict(request.headers), raw))
        try:
            sender = self.link.verify(request.headers, request.path, raw)
        except RequestError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(json.dumps({"from": sender}).encode() + b"\n")
        await response.write(json.dumps({"echo": json.loads(raw)}).encode() + b"\n")
        return response


@pytest.fixture
async def pair() -> AsyncIterator[tuple[PeerLink, Peer]]:
    hub = LocalHub()
    b_url: list[str] = []
    a = PeerLink(LocalCoordinator("a", LEASE_S, hub), lambda: "http://127.0.0.1:9")
    b = Peer(PeerLink(LocalCoordinator("b", LEASE_S, hub), lambda: b_url[0]))
    await b.start()
    b_url.append(b.url)
    await a.start()
    await b.link.start()
    try:
        yield a, b
    finally:
        await a.close()
        await b.link.close()
        await b.runner.cleanup()


async def lines(link: PeerLink, to: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    return [line async for line in link.call(to, PATH, body, read_s=5)]


async def test_a_signed_call_reaches_the_instance_it_names(pair: tuple[PeerLink, Peer]) -> None:
    a, b = pair
    assert await lines(a, "b", {"n": 1}) == [{"from": "a"}, {"echo": {"n": 1}}]


async def test_a_call_signed_for_another_instance_is_refused(pair: tuple[PeerLink, Peer]) -> None:
    """A call meant for "c" that reaches b (an address taken over, a replay) is refused."""
    a, b = pair
    await a.coordinator.note("peer:c", {"url": b.url}, 10)
    with pytest.raises(PeerUnreachable, match="401"):
        await lines(a, "c", {"n": 1})


async def test_unsigned_replayed_or_altered_calls_are_refused(pair: tuple[PeerLink, Peer]) -> None:
    a, b = pair
    await lines(a, "b", {"inbox_id": 1})
    headers, raw = b.seen[-1]
    signed = {k: headers[k] for k in (SENDER, SENT_AT, SIGNATURE)}
    stale = {**signed, SENT_AT: f"{time.time() - 3600:.3f}"}
    async with aiohttp.ClientSession() as http:
        statuses = []
        for given, body in [
            ({}, raw),  # a stranger
            (signed, raw.replace(b"1", b"2")),  # another entry under the same signature
            (stale, raw),  # the same call an hour later
            ({**signed, SENDER: "c"}, raw),  # another sender's name
        ]:
            async with http.post(b.url + PATH, data=body, headers=given) as response:
                statuses.append(response.status)
        async with http.post(b.url + PATH, data=raw, headers=signed) as response:
            again = response.status  # the very same call, within the window, still goes
    assert statuses == [401, 401, 401, 401]
    assert again == 200


async def test_an_instance_with_another_secret_is_refused(pair: tuple[PeerLink, Peer]) -> None:
    _, b = pair
    outsider = PeerLink(LocalCoordinator("a", LEASE_S, LocalHub()), lambda: "http://127.0.0.1:9")
    await outsider.start()
    await outsider.coordinator.note("peer:b", {"url": b.url}, 10)
    try:
        with pytest.raises(PeerUnreachable, match="401"):
            await lines(outsider, "b", {"n": 1})
    finally:
        await outsider.close()


async def test_an_instance_that_published_no_address_is_unreachable_and_says_so(
    pair: tuple[PeerLink, Peer],
) -> None:
    a, _ = pair
    with pytest.raises(PeerUnreachable, match="published no address"):
        await lines(a, "nobody", {"n": 1})
