"""Replies in several parts: `send_parts` skips and reports parts, `Delivery` persists how far a
reply got and resumes there (in the background and at the next start), never from part 1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text

from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.replay import by_reply
from hermes_gateway.errors import (
    PartialDeliveryError,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.metrics import Metrics
from hermes_gateway.platforms.adapter import Health
from hermes_gateway.platforms.parts import send_parts
from hermes_gateway.store.fence import Fence
from hermes_gateway.store.store import Store, Undelivered
from tests.harness import dm

PARTS = ["one", "two", "three"]


def message(text: str = "\n\n".join(PARTS), **kw: object) -> OutboundMessage:
    return OutboundMessage(
        platform="fake", chat_id="c1", text=text, session_key="fake:dm:c1", answers=("m1",), **kw
    )  # type: ignore[arg-type]


class Recorder:
    """`send(index, part)` that records, and fails the parts it is told to."""

    def __init__(self, failures: dict[int, list[Exception]] | None = None) -> None:
        self.sent: list[str] = []
        self.failures = failures or {}

    async def __call__(self, index: int, part: str) -> None:
        if self.failures.get(index):
            raise self.failures[index].pop(0)
        self.sent.append(part)


class TestSendParts:
    async def test_reports_progress_between_parts_only(self) -> None:
        reported: list[int] = []

        async def on_part(n: int) -> None:
            reported.append(n)

        send = Recorder()
        await send_parts(message(on_part=on_part), PARTS, send)
        assert send.sent == PARTS
        assert reported == [1, 2]  # never after the last part: "answered" follows anyway

    async def test_a_single_part_reports_nothing(self) -> None:
        reported: list[int] = []

        async def on_part(n: int) -> None:
            reported.append(n)

        await send_parts(message("one", on_part=on_part), ["one"], Recorder())
        assert reported == []

    async def test_skips_what_an_earlier_attempt_delivered(self) -> None:
        send = Recorder()
        await send_parts(message(skip_parts=2), PARTS, send)
        assert send.sent == ["three"]

    @pytest.mark.parametrize(
        "error", [TransientAdapterError("502"), RateLimitedError("slow down", 600)]
    )
    async def test_a_failure_after_a_part_says_how_far_it_got(self, error: Exception) -> None:
        send = Recorder({1: [error]})
        with pytest.raises(PartialDeliveryError) as caught:
            await send_parts(message(), PARTS, send)
        assert caught.value.parts_sent == 1
        assert caught.value.__cause__ is error
        assert send.sent == ["one"]

    async def test_a_failure_of_a_resumed_send_counts_the_skipped_parts(self) -> None:
        with pytest.raises(PartialDeliveryError) as caught:
            await send_parts(
                message(skip_parts=1), PARTS, Recorder({2: [TransientAdapterError("timed out")]})
            )
        assert caught.value.parts_sent == 2

    async def test_a_failure_of_the_first_part_is_raised_as_it_is(self) -> None:
        error = TransientAdapterError("down")
        with pytest.raises(TransientAdapterError) as caught:
            await send_parts(message(), PARTS, Recorder({0: [error]}))
        assert caught.value is error

    async def test_a_permanent_failure_stays_permanent(self) -> None:
        with pytest.raises(PermanentAdapterError):
            await send_parts(message(), PARTS, Recorder({1: [PermanentAdapterError("blocked")]}))


class SplittingAdapter:
    """An adapter that sends paragraphs as parts and fails them as scripted."""

    name = "fake"

    def __init__(self, failures: dict[int, list[Exception]] | None = None) -> None:
        self.send_part = Recorder(failures)
        self.skips: list[int] = []

    async def send(self, out: OutboundMessage) -> None:
        self.skips.append(out.skip_parts)
        await send_parts(out, out.text.split("\n\n"), self.send_part)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def health(self) -> Health:
        return Health(True)

    def stream(self, event: MessageEvent) -> None:
        return None


def event(message_id: str = "m1", received_at: float = 1.0) -> MessageEvent:
    return dm(message_id, "hi", platform="fake", chat="c1", user="u1", received_at=received_at)


async def parts_sent(store: Store, inbox_id: int) -> tuple[str, int]:
    async def run(db: Any) -> tuple[str, int]:
        query = text("SELECT status, parts_sent FROM inbox WHERE id = :i")
        row = (await db.execute(query, {"i": inbox_id})).one()
        return str(row[0]), int(row[1])

    result: tuple[str, int] = await store.read(run)
    return result


class TestDelivery:
    async def test_a_redelivery_resumes_at_the_failed_part(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(Delivery, "redeliver_delays", (0.01,))
        outage = [TransientAdapterError("503") for _ in range(3)]
        adapter = SplittingAdapter({1: outage})
        delivery = Delivery({"fake": adapter}, store, EventBus(timeout=1), Metrics())
        progress, written = store.progress, []

        async def recorded(ids: list[int], n: int) -> None:
            await progress(ids, n)
            written.append((n, list(adapter.send_part.sent)))  # committed, and what was sent

        monkeypatch.setattr(store, "progress", recorded)
        inbox_id = await store.accept(event())
        assert inbox_id is not None
        assert not await delivery.send(message(), [inbox_id])
        assert written[0] == (1, ["one"])  # durable before part 2 was tried
        for _ in range(200):
            if (await parts_sent(store, inbox_id))[0] == "answered":
                break
            await asyncio.sleep(0.01)
        await delivery.close()
        assert adapter.send_part.sent == PARTS  # part 1 once, then 2 and 3
        assert adapter.skips == [0, 1, 1, 1]  # three failures of part 2, then it went
        assert written == [(1, ["one"]), (2, ["one", "two"])]
        assert await parts_sent(store, inbox_id) == ("answered", 2)

    async def test_a_one_part_reply_writes_no_progress(self, store: Store) -> None:
        writes: list[int] = []
        progress = store.progress

        async def counting(ids: list[int], n: int) -> None:
            writes.append(n)
            await progress(ids, n)

        store.progress = counting  # type: ignore[method-assign]
        delivery = Delivery({"fake": SplittingAdapter()}, store, EventBus(timeout=1), Metrics())
        inbox_id = await store.accept(event())
        assert await delivery.send(message("just one"), [inbox_id])
        assert writes == []
        assert await delivery.send(message(), [inbox_id])
        assert writes == [1, 2]

    async def test_no_part_goes_out_once_another_instance_claimed_the_session(
        self, store: Store
    ) -> None:
        """Cluster mode: the lease passed on while the reply was going out (this instance was
        paused, or lost its lease mid-reply); the new owner replays it from the inbox, so no
        further part may go out from here."""
        key = "fake:dm:c1"
        await store.claim(Fence(key, 1))
        adapter, sent = SplittingAdapter(), []
        taken = Fence(key, 2)

        async def then_taken_over(index: int, part: str) -> None:
            sent.append(part)
            if index == 0:
                await store.claim(taken)  # another instance took the session meanwhile

        adapter.send_part = then_taken_over  # type: ignore[assignment]
        delivery = Delivery({"fake": adapter}, store, EventBus(timeout=1), Metrics())
        inbox_id = await store.accept(event())
        assert inbox_id is not None
        await store.complete_turn(key, [], [inbox_id], "\n\n".join(PARTS), "run1")
        assert not await delivery.send(message(run_id="run1"), [inbox_id], fence=Fence(key, 1))
        assert sent == ["one"]
        assert not delivery.owes(key)  # nothing offered again in the background either
        # what the new owner reads: part 1 out, part 2 never begun (not in doubt)
        [left] = (await store.replayable(3600))[1]
        assert (left.parts_sent, left.doubt) == (1, None)

    async def test_a_redelivery_stops_once_the_session_moved_on(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(Delivery, "redeliver_delays", (0.01,))
        key = "fake:dm:c1"
        await store.claim(Fence(key, 1))
        adapter, sent, tries = SplittingAdapter(), [], []

        async def fails_then_taken_over(index: int, part: str) -> None:
            tries.append(index)
            if index == 1 and tries.count(1) == 1:
                await store.claim(Fence(key, 2))  # taken over while part 2 is failing
                raise TransientAdapterError("503")
            sent.append(part)

        adapter.send_part = fails_then_taken_over  # type: ignore[assignment]
        delivery = Delivery({"fake": adapter}, store, EventBus(timeout=1), Metrics())
        inbox_id = await store.accept(event())
        assert inbox_id is not None
        assert not await delivery.send(message(), [inbox_id], fence=Fence(key, 1))
        assert delivery.owes(key)  # offered again in the background...
        for _ in range(200):
            if not delivery.owes(key):
                break
            await asyncio.sleep(0.01)
        assert not delivery.owes(key)  # ...which the new owner's claim ended
        assert (sent, tries) == (["one"], [0, 1])
        assert adapter.skips == [0, 1]  # one more attempt, refused before its first part
        assert await parts_sent(store, inbox_id) == ("accepted", 1)


class TestReplayable:
    async def test_progress_survives_in_the_inbox(self, store: Store) -> None:
        inbox_id = await store.accept(event())
        assert inbox_id is not None
        await store.complete_turn("fake:dm:c1", [], [inbox_id], "a\n\nb\n\nc", "run1")
        await store.progress([inbox_id], 2)
        await store.remember_preview(event(), "777")
        _to_run, [left] = await store.replayable(3600)
        assert (left.inbox_id, left.parts_sent, left.reply) == (inbox_id, 2, "a\n\nb\n\nc")
        assert await store.previews([inbox_id]) == {inbox_id: "777"}

    def test_a_merged_reply_is_one_group(self) -> None:
        rows = [
            Undelivered(1, event("m1"), "both", "run1"),
            Undelivered(2, event("m2"), "both", "run1"),
            Undelivered(3, event("m3"), "other", "run2"),
            Undelivered(4, event("m4"), "legacy", ""),
            Undelivered(5, event("m5"), "legacy", ""),
        ]
        groups = [[u.inbox_id for u in g] for g in by_reply(rows)]
        assert groups == [[1, 2], [3], [4], [5]]
