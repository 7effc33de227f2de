"""The local API in a cluster: a request whose session another instance runs is carried there
and its answer (its stream too) comes back on the request's own connection. `follow` is the
side of the instance that took the request; `pump` the owner's, which writes what the answer
is made of (text deltas, tool notes, the reply or how the run ended) as JSON lines."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import structlog

from adapters.api.stream import Item, ToolNote
from adapters.api.wire import Ended
from hermes_gateway.platforms import (
    MessageEvent,
    OutboundKind,
    OutboundMessage,
    Peers,
    PeerUnreachable,
    RequestError,
    Whereabouts,
)

log = structlog.get_logger("hermes.adapters.api")
CARRY_PATH = "/cluster/v1/chat"  # signed calls between instances only (never a client's)
FEED_PATH = "/cluster/v1/feed"  # what one instance said unasked, for the others' feeds
Answer = OutboundMessage | Ended
Write = Callable[[dict[str, Any]], Awaitable[None]]
UNAVAILABLE = "The gateway cannot coordinate with its other instances right now; retry soon."
UNREACHABLE = (
    "This conversation runs on another gateway instance ({owner}), which cannot be reached "
    "({why}). Your message is kept: that instance, or the next one to run the conversation, "
    "answers it into the history."
)
KINDS: tuple[OutboundKind, ...] = ("reply", "notice", "error")


@dataclass(frozen=True, slots=True)
class Hop:
    """A request carried to its session's owner: the inbox entry to answer (the owner reads
    the message from the shared store, never from the call), whether to stream, and how often
    the owner says it is still there while nothing else comes."""

    session_key: str
    inbox_id: int
    message_id: str
    stream: bool
    beat_s: float

    def body(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, body: Any) -> Hop:
        try:
            hop = cls(
                str(body["session_key"]),
                int(body["inbox_id"]),
                str(body["message_id"]),
                bool(body["stream"]),
                float(body["beat_s"]),
            )
        except (KeyError, TypeError, ValueError):
            raise RequestError(400, "not a carried request", "invalid_request_error") from None
        return replace(hop, beat_s=min(max(hop.beat_s, 0.2), 10.0))


def beat_for(lease_s: float) -> float:
    """A silent owner is given up within about a lease (a frozen one has lost its sessions)."""
    return min(5.0, max(0.2, lease_s / 3))


# -- the owner's side ---------------------------------------------------------------------


def encode(item: Item) -> dict[str, Any]:
    if isinstance(item, str):
        return {"delta": item}
    if isinstance(item, ToolNote):
        return {"tool": {"name": item.tool, "phase": item.phase, "ok": item.ok}}
    if isinstance(item, Ended):
        return {"ended": {"why": item.why, "run_id": item.run_id, "usage": dict(item.usage)}}
    reply = {"text": item.text, "kind": item.kind, "run_id": item.run_id}
    reply.update(outcome=item.outcome, error=item.error)
    return {"reply": {**reply, "usage": dict(item.usage)}}


def stored(where: Whereabouts) -> dict[str, Any]:
    """The line for an entry answered already: its stored reply, or why there is none."""
    if where.status == "answered" and not where.reply:  # its run was interrupted
        return {"ended": {"why": "interrupted", "run_id": where.run_id}}
    if where.status in ("answered", "done"):
        return {"reply": {"text": where.reply, "kind": "reply", "run_id": where.run_id}}
    text = f"Your message was not answered: it was {where.status or 'lost'}."
    return {"reply": {"text": text, "kind": "error", "outcome": where.status or "not_answered"}}


async def pump(
    write: Write, next_item: Callable[[], Awaitable[Item]], beat_s: float, holds: Callable[[], bool]
) -> None:
    """Write each item as it comes, up to the answer; a beat when nothing came for ``beat_s``,
    and "moved" once this instance no longer holds the session (its lease was lost, or it is
    stopping: the entry stays in the inbox and the session's next owner answers it)."""
    waiting: asyncio.Future[Item] | None = None
    try:
        while True:
            if waiting is None:
                waiting = asyncio.ensure_future(next_item())
            done, _ = await asyncio.wait({waiting}, timeout=beat_s)
            if not done:
                if not holds():
                    await write({"moved": "the session's lease was lost here"})
                    return
                await write({"beat": 1})
                continue
            if waiting.cancelled():  # the request this joined ended without an answer
                await write({"moved": "the request waiting here ended unanswered"})
                return
            item, waiting = waiting.result(), None
            if isinstance(item, Ended) and item.why == "shutting_down":
                await write({"moved": "this instance is stopping"})
                return
            await write(encode(item))
            if isinstance(item, OutboundMessage | Ended):
                return
    finally:
        if waiting is not None:
            waiting.cancel()


# -- the side that took the request --------------------------------------------------------


def decode(line: dict[str, Any], event: MessageEvent) -> Item | None:
    """An item of the answer (None: a beat); `KeyError`, `TypeError`, `ValueError` if it is
    not one."""
    if "delta" in line:
        return str(line["delta"])
    if "tool" in line:
        tool = line["tool"]
        ok = tool.get("ok")
        return ToolNote(str(tool["name"]), str(tool["phase"]), None if ok is None else bool(ok))
    if "ended" in line:
        ended = line["ended"]
        usage = tuple((str(k), int(v)) for k, v in dict(ended.get("usage") or {}).items())
        return Ended(str(ended["why"]), str(ended.get("run_id", "")), usage)
    if "reply" in line:
        reply = line["reply"]
        kind: OutboundKind = "error"
        for known in KINDS:
            kind = known if reply.get("kind") == known else kind
        return OutboundMessage.to(
            event,
            str(reply["text"]),
            kind,
            run_id=str(reply.get("run_id", "")),
            outcome=str(reply.get("outcome", "")),
            error=str(reply.get("error", "")),
            usage={str(k): int(v) for k, v in dict(reply.get("usage") or {}).items()},
        )
    return None


async def follow(
    peers: Peers,
    hop: Hop,
    event: MessageEvent,
    feed: Callable[[Item], None],
    lost: Callable[[], None],
) -> None:
    """Bring the request its answer from wherever its session runs (``feed`` takes each item;
    the last is the answer), however owners change meanwhile; never leaves it unanswered.
    ``lost``: a run of it was cut off unanswered (its lease lost here, its owner gone after
    streaming some of it): it is run again, and what was streamed cannot be taken back."""
    try:
        feed(await _answer(peers, hop, event, feed, lost))
    except Exception:
        log.exception("api.follow_failed", session_key=hop.session_key, inbox_id=hop.inbox_id)
        text = "internal error while fetching the answer from another instance; see the log"
        feed(OutboundMessage.to(event, text, "error", outcome="internal_error"))


async def _answer(
    peers: Peers,
    hop: Hop,
    event: MessageEvent,
    feed: Callable[[Item], None],
    lost: Callable[[], None],
) -> Answer:
    pause = min(1.0, max(0.1, peers.lease_s / 10))
    give_up_s = 2 * peers.lease_s + 5  # a dead owner's lease has run out well before
    passed = _Passed(feed)
    stuck: tuple[str, float] | None = None  # the owner that cannot be reached, and since when
    while True:
        where = await peers.take(hop.session_key, hop.inbox_id)
        if where.where == "here":  # its answer comes to the request as a local one does
            while peers.holds(hop.session_key):  # noqa: ASYNC110  # a lease has no event
                await asyncio.sleep(pause)
            lost()
            continue  # the lease was lost before the answer: wherever the entry goes next
        if where.where == "answered":
            return _final(stored(where), event)
        if where.where == "unavailable":
            log.warning("api.carry_unavailable", session_key=hop.session_key, why=where.why)
            return OutboundMessage.to(
                event, UNAVAILABLE, "error", outcome="coordination_unavailable"
            )
        owner = where.owner
        if owner is not None and owner != peers.instance:
            try:
                answer = await _relay(peers, owner, hop, event, passed)
            except PeerUnreachable as exc:
                if passed.count:
                    lost()
                if stuck is None or stuck[0] != owner:
                    stuck = (owner, time.monotonic())
                    log.warning("api.owner_unreachable", owner=owner, error=str(exc))
                elif time.monotonic() - stuck[1] > give_up_s:
                    text = UNREACHABLE.format(owner=owner, why=exc)
                    return OutboundMessage.to(event, text, "error", outcome="owner_unreachable")
            else:
                if answer is not None:
                    return answer
                if passed.count:
                    lost()
                stuck = None
        await asyncio.sleep(pause)  # between owners, or the owner moved on: ask again


class _Passed:
    """``feed``, counting the pieces passed on (a stream that an owner's end cuts short)."""

    def __init__(self, feed: Callable[[Item], None]) -> None:
        self.feed = feed
        self.count = 0

    def __call__(self, item: Item) -> None:
        self.count += 1
        self.feed(item)


async def _relay(
    peers: Peers, owner: str, hop: Hop, event: MessageEvent, feed: Callable[[Item], None]
) -> Answer | None:
    """Carry the request to ``owner`` and pass on what comes back: the answer, or None when
    the owner no longer runs the session. `PeerUnreachable` when it cannot be reached, goes
    silent for three beats, or ends the connection before the answer."""
    log.info("api.carried", owner=owner, session_key=hop.session_key, inbox_id=hop.inbox_id)
    lines = peers.call(owner, CARRY_PATH, hop.body(), read_s=3 * hop.beat_s + 1)
    async with contextlib.aclosing(lines):
        async for line in lines:
            if "moved" in line:
                log.info("api.owner_moved_on", owner=owner, why=str(line["moved"]))
                return None
            item = _item(line, event)
            if isinstance(item, OutboundMessage | Ended):
                return item
            if item is not None:
                feed(item)
    raise PeerUnreachable(f"{owner} ended the connection before the answer")


def _final(line: dict[str, Any], event: MessageEvent) -> Answer:
    item = _item(line, event)
    assert isinstance(item, OutboundMessage | Ended)
    return item


def _item(line: dict[str, Any], event: MessageEvent) -> Item | None:
    try:
        return decode(line, event)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PeerUnreachable(f"a line of the answer is not understood: {exc!r}") from None
