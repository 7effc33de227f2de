"""The local API's side of a request carried to its session's owner (`adapters/api/relay.py`),
against a scripted cluster: what the owner sends is passed on in order, an owner that moves on
is followed, and one that cannot be reached is named in a 502 that says why."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from adapters.api.relay import Hop, follow
from adapters.api.stream import Item, ToolNote
from adapters.api.wire import failure
from hermes_gateway.errors import PeerUnreachable
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.platforms.peers import Whereabouts

EVENT = MessageEvent.create(
    platform="api", chat_type="dm", chat_id="ann", user_id="ann", message_id="m1", text="hi"
)
HOP = Hop(EVENT.session_key, 7, "m1", True, 0.2)


class ScriptedPeers:
    """`Peers` whose answers are scripted: each `take` the next whereabouts (the last one
    repeats), each call the next list of lines, or `PeerUnreachable` for a string."""

    instance = "a"

    def __init__(
        self, where: list[Whereabouts], calls: list[list[dict[str, Any]] | str], lease_s: float
    ) -> None:
        self.where, self.calls, self.lease_s = where, calls, lease_s
        self.called: list[str] = []

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def holds(self, session_key: str) -> bool:
        return False

    def others(self) -> list[str]:
        return []

    async def entry(self, event: MessageEvent) -> int | None:
        return None

    async def take(self, session_key: str, inbox_id: int) -> Whereabouts:
        return self.where.pop(0) if len(self.where) > 1 else self.where[0]

    async def call(
        self, to: str, path: str, body: Mapping[str, Any], read_s: float
    ) -> AsyncGenerator[dict[str, Any], None]:
        self.called.append(to)
        script = self.calls.pop(0) if len(self.calls) > 1 else self.calls[0]
        if isinstance(script, str):
            raise PeerUnreachable(script)
        for line in script:
            yield line

    def verify(self, headers: Mapping[str, str], path: str, body: bytes) -> str:
        return "b"


async def carried(peers: ScriptedPeers) -> list[Item]:
    got: list[Item] = []
    await follow(peers, HOP, EVENT, got.append, lambda: None)
    return got


async def test_what_the_owner_sends_is_passed_on_in_order() -> None:
    lines = [
        {"beat": 1},
        {"delta": "hel"},
        {"tool": {"name": "search", "phase": "start", "ok": None}},
        {"delta": "lo"},
        {"reply": {"text": "hello", "kind": "reply", "run_id": "r1", "usage": {"total_tokens": 3}}},
    ]
    got = await carried(ScriptedPeers([Whereabouts("elsewhere", owner="b")], [lines], 3))
    assert got[:3] == ["hel", ToolNote("search", "start", None), "lo"]
    [answer] = got[3:]
    assert isinstance(answer, OutboundMessage)
    assert (answer.text, answer.run_id, answer.answers) == ("hello", "r1", ("m1",))


async def test_an_owner_that_moved_on_is_followed_to_the_stored_answer() -> None:
    where = [
        Whereabouts("elsewhere", owner="b"),
        Whereabouts("elsewhere", owner="c"),
        Whereabouts("answered", status="answered", reply="done by c", run_id="r2"),
    ]
    peers = ScriptedPeers(where, [[{"moved": "lease lost"}], "c at http://c: refused"], 3)
    got = await carried(peers)
    assert peers.called == ["b", "c"]
    [answer] = got
    assert isinstance(answer, OutboundMessage) and answer.text == "done by c"


async def test_an_owner_that_cannot_be_reached_is_named_in_a_502_that_says_why() -> None:
    peers = ScriptedPeers(
        [Whereabouts("elsewhere", owner="b-9")], ["b-9 at http://10.0.0.9:8642: refused"], 0.1
    )
    started = time.monotonic()
    [answer] = await carried(peers)
    waited = time.monotonic() - started
    assert isinstance(answer, OutboundMessage)
    error = failure(answer)
    assert error is not None and error.status == 502 and error.code == "owner_unreachable"
    assert "b-9" in str(error) and "refused" in str(error)
    assert waited >= 5  # it kept trying for `2 * lease_s + 5 s` first
    assert len(peers.called) > 10
