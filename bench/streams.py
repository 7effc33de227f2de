"""What streamed text costs the event loop with many runs streaming at once: ``--streams``
threads (the agents' threads) each push ``--rate`` deltas a second for ``--seconds`` through
`Progress` (coalesced: at most one pending loop callback per sink) and, alternately, one loop
callback per delta (the hop before coalescing). Prints loop callbacks per second, the sinks'
pushes per second, and the process's CPU per delta. ``--busy-ms``: the loop is also kept busy
that long at a time (other runs' work; a loaded loop's lag), yielding between slices.

    python -m bench.streams [--streams 200] [--rate 50] [--seconds 5] [--busy-ms 0 30]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.progress import Progress
from hermes_gateway.events import MessageEvent
from hermes_gateway.metrics import Metrics


class _Sink:
    __slots__ = ("chars", "pushes")

    def __init__(self) -> None:
        self.pushes = 0
        self.chars = 0

    def push(self, text: str) -> None:
        self.pushes += 1
        self.chars += len(text)

    def tool(self, name: str, phase: str, ok: bool | None) -> None:
        pass


class _Loop(asyncio.SelectorEventLoop):
    """Counts the callbacks other threads hand the loop."""

    handed = 0

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[..., Any], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        self.handed += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


class _PerDelta:
    """The hop before coalescing: one loop callback per delta."""

    def __init__(self, sink: _Sink) -> None:
        self.sink, self.loop = sink, asyncio.get_running_loop()

    def delta(self, text: str) -> None:
        self.loop.call_soon_threadsafe(self.sink.push, text)


def _stream(delta: Callable[[str], None], rate: float, until: float) -> None:
    pause, due = 1.0 / rate, time.monotonic()
    while due < until:
        delta("token ")
        due += pause
        time.sleep(max(0.0, due - time.monotonic()))


async def _busy(slice_s: float) -> None:
    """Other work on the loop: ``slice_s`` of CPU at a time, a yield between slices."""
    while slice_s > 0:
        until = time.perf_counter() + slice_s
        while time.perf_counter() < until:
            pass
        await asyncio.sleep(0)


async def _side(
    coalesced: bool, streams: int, rate: float, seconds: float, busy_s: float
) -> dict[str, float]:
    bus, metrics = EventBus(), Metrics()
    sinks = [_Sink() for _ in range(streams)]
    event = MessageEvent.create(
        platform="api", chat_type="dm", chat_id="1", user_id="1", message_id="1", text="hi"
    )
    hops: list[Any] = [
        Progress(event, f"run{i}", lambda: False, s, bus=bus, metrics=metrics)
        if coalesced
        else _PerDelta(s)
        for i, s in enumerate(sinks)
    ]
    loop = asyncio.get_running_loop()
    assert isinstance(loop, _Loop)
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=_stream, args=(h.delta, rate, until)) for h in hops]
    handed, cpu, started = loop.handed, time.process_time(), time.monotonic()
    for thread in threads:
        thread.start()
    load = asyncio.create_task(_busy(busy_s))
    for thread in threads:
        await asyncio.to_thread(thread.join)
    load.cancel()
    await asyncio.sleep(0.05)  # the last callbacks
    took, cpu = time.monotonic() - started, time.process_time() - cpu
    bus.executor.shutdown()
    deltas = sum(s.chars for s in sinks) / len("token ")
    return {
        "deltas_per_s": deltas / took,
        "callbacks_per_s": (loop.handed - handed) / took,
        "pushes_per_s": sum(s.pushes for s in sinks) / took,
        "cpu_us_per_delta": cpu / deltas * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0, help="deltas a second per stream")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--busy-ms", type=float, nargs="*", default=[0.0, 30.0])
    args = parser.parse_args()
    print("| hop | loop busy ms | deltas/s | loop callbacks/s | sink pushes/s | CPU us/delta |")
    print("|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for busy, coalesced in ((b, c) for b in args.busy_ms for c in (False, True)):
            loop = _Loop()
            try:
                row = loop.run_until_complete(
                    _side(coalesced, args.streams, args.rate, args.seconds, busy / 1000)
                )
            finally:
                loop.close()
            name = "coalesced" if coalesced else "per delta"
            print(
                f"| {name} | {busy:g} | {row['deltas_per_s']:,.0f} | {row['callbacks_per_s']:,.0f} "
                f"| {row['pushes_per_s']:,.0f} | {row['cpu_us_per_delta']:.1f} |"
            )


if __name__ == "__main__":
    main()
