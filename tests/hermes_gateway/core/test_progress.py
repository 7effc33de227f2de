"""The hop of a run's streamed text from the agent's thread to the loop: coalesced, so a busy
loop takes every stream's backlog in one callback, each in the order it was produced."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.progress import Progress
from hermes_gateway.metrics import Metrics
from tests.harness import dm


class Sink:
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def push(self, text: str) -> None:
        self.seen.append(("text", text))

    def tool(self, name: str, phase: str, ok: bool | None) -> None:
        self.seen.append(("tool", name, phase))


class CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the callbacks other threads hand it."""

    handed = 0

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        self.handed += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


def _run(main: Callable[[], Any]) -> CountingLoop:
    loop = CountingLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return loop


def _progress(sink: Sink, bus: EventBus) -> Progress:
    return Progress(dm("1", "hi"), "run1", lambda: False, sink, bus=bus, metrics=Metrics())


def test_deltas_from_many_threads_while_the_loop_is_busy_take_one_callback_in_order() -> None:
    """20 runs each push 1,000 deltas and two tool events while the loop is busy: one loop
    callback for them all, and each sink sees its text and tools in the order they happened."""
    sinks, bus = [Sink() for _ in range(20)], EventBus()
    pieces = [f"w{i} " for i in range(1000)]

    def agent(progress: Progress) -> None:
        for piece in pieces[:500]:
            progress.delta(piece)
        progress.event("tool_start", {"tool": "search"})
        progress.event("tool_end", {"tool": "search", "ok": True})
        for piece in pieces[500:]:
            progress.delta(piece)

    async def main() -> None:
        threads = [threading.Thread(target=agent, args=(_progress(s, bus),)) for s in sinks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()  # the loop is busy meanwhile (as under a thousand streams)
        for _ in range(3):
            await asyncio.sleep(0)

    loop = _run(main)
    bus.executor.shutdown()
    assert loop.handed == 1
    for sink in sinks:
        assert sink.seen == [
            ("text", "".join(pieces[:500])),
            ("tool", "search", "start"),
            ("tool", "search", "end"),
            ("text", "".join(pieces[500:])),
        ]


def test_deltas_spread_over_time_each_reach_the_sink_and_text_stays_whole() -> None:
    """A delta arriving after the previous callback ran gets a callback of its own: nothing
    waits in the buffer for the next delta."""
    sink, bus = Sink(), EventBus()

    async def main() -> None:
        progress = _progress(sink, bus)
        for piece in ("a", "b", "c"):
            await asyncio.to_thread(progress.delta, piece)
            for _ in range(3):
                await asyncio.sleep(0)
            assert sink.seen[-1] == ("text", piece)

    loop = _run(main)
    bus.executor.shutdown()
    assert [s[1] for s in sink.seen] == ["a", "b", "c"]
    assert loop.handed >= 3
