"""The live preview component: throttled edits of one message, the platform's render (a
truncation here), a rate limit honoured, a preview a crash left continued or posted anew, and
the book that hands previews over to the final reply. Time is a manual clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from hermes_gateway.errors import (
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.preview import LivePreview, PreviewBook, PreviewWire
from tests.hermes_gateway.platforms.manual_time import ManualTime, settle


class Wire:
    """A platform that records every call; ``fail`` queues errors for the next calls."""

    def __init__(self, limit: int = 1000) -> None:
        self.calls: list[tuple[str, int | None, str]] = []
        self.fail: list[Exception] = []
        self.limit = limit
        self.next_id = 100

    async def post(self, text: str) -> int:
        self._maybe_fail()
        self.next_id += 1
        self.calls.append(("post", self.next_id, text))
        return self.next_id

    async def edit(self, ref: int, text: str) -> None:
        self._maybe_fail()
        self.calls.append(("edit", ref, text))

    def render(self, text: str) -> str:
        text = text.strip()
        return text if len(text) <= self.limit else text[: self.limit - 1] + "…"

    def _maybe_fail(self) -> None:
        if self.fail:
            raise self.fail.pop(0)

    def preview(
        self,
        time: ManualTime,
        adopted: int | None = None,
        on_posted: Callable[[str], Awaitable[None]] | None = None,
    ) -> LivePreview[int]:
        wire = PreviewWire("test", self.post, self.edit, self.render, interval=1.0)
        return LivePreview(
            wire, adopted=adopted, on_posted=on_posted, sleep=time.sleep, clock=time.clock
        )


async def test_edits_are_throttled_to_one_per_interval() -> None:
    time, wire = ManualTime(), Wire()
    preview = wire.preview(time)
    preview.push("a")
    await settle()
    preview.push("b")
    preview.push("c")
    await settle()
    await time.advance(0.5)
    assert wire.calls == [("post", 101, "a")]  # nothing more within the interval
    await time.advance(0.5)
    assert wire.calls == [("post", 101, "a"), ("edit", 101, "abc")]  # the pushes as one edit
    await time.advance(5)
    assert len(wire.calls) == 2  # nothing new, no edit
    assert await preview.finish() == 101


async def test_text_past_the_limit_is_truncated_and_not_edited_again() -> None:
    time, wire = ManualTime(), Wire(limit=5)
    preview = wire.preview(time)
    preview.push("abcdefgh")
    await settle()
    preview.push("ijk")
    await time.advance(1)
    assert wire.calls == [("post", 101, "abcd…")]
    assert await preview.finish() == 101


async def test_a_rate_limit_pauses_edits_as_long_as_the_platform_asks() -> None:
    time, wire = ManualTime(), Wire()
    preview = wire.preview(time)
    preview.push("a")
    await settle()
    wire.fail.append(RateLimitedError("slow down", retry_after=5))
    preview.push("b")
    await time.advance(1)  # the edit is refused
    preview.push("c")
    await time.advance(3)
    assert wire.calls == [("post", 101, "a")]
    await time.advance(2)
    assert wire.calls[-1] == ("edit", 101, "abc")
    await preview.finish()


async def test_a_preview_left_by_a_crash_is_continued() -> None:
    time, wire = ManualTime(), Wire()
    preview = wire.preview(time, adopted=7)
    preview.push("again")
    await settle()
    assert wire.calls == [("edit", 7, "again")]
    assert await preview.finish() == 7


async def test_a_preview_left_by_a_crash_that_is_gone_is_posted_anew() -> None:
    time, wire = ManualTime(), Wire()
    posted: list[str] = []

    async def remember(ref: str) -> None:
        posted.append(ref)

    wire.fail.append(PermanentAdapterError("message to edit not found"))
    preview = wire.preview(time, adopted=7, on_posted=remember)
    preview.push("again")
    await settle()
    assert wire.calls == []  # the edit failed
    await time.advance(1)
    assert wire.calls == [("post", 101, "again")]
    assert posted == ["101"]
    assert await preview.finish() == 101


async def test_a_permanent_failure_stops_previewing_and_a_transient_one_does_not() -> None:
    time, wire = ManualTime(), Wire()
    preview = wire.preview(time)
    wire.fail.append(TransientAdapterError("timed out"))
    preview.push("a")
    await settle()
    preview.push("b")
    await time.advance(1)
    assert wire.calls == [("post", 101, "ab")]
    wire.fail.append(PermanentAdapterError("blocked"))
    preview.push("c")
    await time.advance(1)
    preview.push("d")
    await time.advance(1)
    assert wire.calls == [("post", 101, "ab")]  # stopped: no more calls
    assert await preview.finish() == 101


async def test_finish_with_a_note_marks_what_was_shown() -> None:
    time, wire = ManualTime(), Wire()
    preview = wire.preview(time)
    preview.push("half")
    await settle()
    assert await preview.finish(" (interrupted)") == 101
    preview.push("late")  # after finish: ignored
    await settle()
    assert wire.calls == [("post", 101, "half"), ("edit", 101, "half (interrupted)")]


def event(message_id: str) -> MessageEvent:
    return MessageEvent.create(
        platform="test", chat_type="dm", chat_id="c", user_id="u", message_id=message_id, text="q"
    )


async def test_the_book_hands_a_live_or_crash_left_preview_to_the_reply() -> None:
    wire = Wire()
    remembered: list[tuple[str, str]] = []

    async def remember(ev: MessageEvent, ref: str) -> None:
        remembered.append((ev.message_id, ref))

    book: PreviewBook[str, int] = PreviewBook("test", remember)
    live = book.open("m1", event("m1"), PreviewWire("test", wire.post, wire.edit, wire.render))
    live.push("streamed")
    await settle()
    book.adopt("m2", 42)
    continued = book.open("m2", event("m2"), PreviewWire("test", wire.post, wire.edit, wire.render))
    assert continued.ref == 42 and continued.adopted
    assert await book.take("m1") == 101
    assert await book.take("m1") is None  # taken once
    assert await book.take("m2") == 42
    assert remembered == [("m1", "101")]


async def test_the_book_keeps_a_preview_a_failed_reply_could_not_edit() -> None:
    book: PreviewBook[str, int] = PreviewBook("test")

    async def gone() -> None:
        raise PermanentAdapterError("deleted")

    async def flaky() -> None:
        raise TransientAdapterError("reset")

    assert not await book.into("m1", 5, gone)  # post anew
    assert book.pop_orphan("m1") is None
    with pytest.raises(TransientAdapterError):
        await book.into("m1", 5, flaky)
    assert book.pop_orphan("m1") == 5  # the redelivery edits it


async def test_the_book_closes_the_oldest_previews_past_its_bounds() -> None:
    time, wire = ManualTime(), Wire()
    book: PreviewBook[str, int] = PreviewBook("test", most=2, max_age=60, clock=time.clock)
    wired = PreviewWire("test", wire.post, wire.edit, wire.render)
    first = book.open("m1", event("m1"), wired)
    book.open("m2", event("m2"), wired)
    book.open("m3", event("m3"), wired)  # over `most`: m1 goes
    first.push("late")
    assert book.pop("m1") is None and wire.calls == []
    await time.advance(61)
    book.open("m4", event("m4"), wired)  # m2 and m3 are past max_age
    assert book.pop("m2") is None and book.pop("m3") is None
    assert book.pop("m4") is not None
