"""A run's progress, carried from the agent's thread to the loop: the streamed text and the
tool notes to the platform's stream sink, tool events to the bus, model calls to the metrics."""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any

import structlog

from hermes_gateway.core.bus import EventBus
from hermes_gateway.events import MessageEvent
from hermes_gateway.metrics import Metrics
from hermes_gateway.platforms.adapter import StreamSink
from hermes_gateway.traces import OFF, Tracer, scalar_attrs

log = structlog.get_logger("hermes.runner")
# what a model call's span carries of the agent's report: outcome and counts, no error text
_MODEL_ATTRS = (
    "model",
    "outcome",
    "status",
    "error_class",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "retries",
    "ttft_ms",
)
# what waits for the loop: a piece of text, or a tool event (kind, data)
_Item = str | tuple[str, dict[str, Any]]


class Progress:
    """`delta` and `event` are the agent's callbacks and run on its thread. Text and tool
    notes take the same hop to the loop, so the sink gets them in the order they happened;
    the bus's subscribers then take each tool event at their own pace.

    The hop is coalesced (`_Hop`): what a run sends waits in its own buffer, and one loop
    callback at a time takes every run's buffer, adjacent text as one push. A model streams
    tens of deltas a second, so a thousand streams would otherwise wake the loop tens of
    thousands of times a second; this way a loaded loop takes them all once per turn."""

    def __init__(
        self,
        message: MessageEvent,
        run_id: str,
        stopped: Callable[[], bool],
        sink: StreamSink | None,
        *,
        bus: EventBus,
        metrics: Metrics,
        tracer: Tracer = OFF,
    ) -> None:
        self.message = message  # the one the run answers
        self.run_id = run_id
        self.stopped = stopped  # a stopped run's late progress is nobody's
        self.sink = sink
        self.bus = bus
        self.metrics = metrics
        self.tracer = tracer  # spans made here, on the agent's thread: the run's is current
        self.loop = asyncio.get_running_loop()
        self.hop = _hop_of(self.loop)
        self.buffer: list[_Item] = []  # under the hop's lock; taken whole by `_Hop.drain`

    def delta(self, text: str) -> None:
        if self.sink is not None and not self.stopped():
            self.hop.send(self, text)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "model_call":
            self.metrics.model_call(data)  # counted here: it needs no hop to the loop
            attrs = scalar_attrs("hermes.model.", data, _MODEL_ATTRS)
            self.tracer.finished("model.call", float(data.get("seconds", 0.0)), attrs)
        else:
            if kind == "tool_end":
                attrs = scalar_attrs("hermes.tool.", data, ("tool", "ok", "bytes_out"))
                self.tracer.finished("tool.call", float(data.get("duration_s", 0.0)), attrs)
            self.hop.send(self, (kind, data))

    def deliver(self, items: list[_Item]) -> None:
        """On the loop: what the run sent since the last delivery, in order."""
        text: list[str] = []
        for item in items:
            if isinstance(item, str):
                text.append(item)
                continue
            self._push(text)
            self._tool_event(*item)
        self._push(text)

    def _push(self, text: list[str]) -> None:
        """The adjacent pieces of text as one push (the sink sees the same text in order)."""
        if text and self.sink is not None:
            self.sink.push("".join(text))
            text.clear()

    def take(self) -> list[_Item]:
        """What waits in the buffer, which is left empty (under the hop's lock)."""
        items, self.buffer = self.buffer, []
        return items

    def _tool_event(self, kind: str, data: dict[str, Any]) -> None:
        if self.stopped():
            return
        if self.sink is not None and (tool := data.get("tool")):
            self.sink.tool(str(tool), "start" if kind == "tool_start" else "end", data.get("ok"))
        self.bus.emit("tool_event", self.message, run_id=self.run_id, kind=kind, **data)


class _Hop:
    """The runs' progress on its way to one loop: at most one loop callback is pending for
    all of them. A run's item scheduled before its result (which takes a hop of its own) is
    delivered before it: the callback pending when the item arrived runs first, and takes
    the buffers only as it runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lock = threading.Lock()
        self.ready: list[Progress] = []  # runs with a non-empty buffer, in arrival order

    def send(self, progress: Progress, item: _Item) -> None:
        with self.lock:
            if not progress.buffer:
                if not self.ready:
                    self.loop.call_soon_threadsafe(self.drain)
                self.ready.append(progress)
            progress.buffer.append(item)

    def drain(self) -> None:
        with self.lock:
            ready, self.ready = self.ready, []
            taken = [(progress, progress.take()) for progress in ready]
        for progress, items in taken:
            try:
                progress.deliver(items)
            except Exception:  # one sink's failure is not the other runs'
                log.exception("runner.progress_failed", run_id=progress.run_id)


_HOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hop] = weakref.WeakKeyDictionary()


def _hop_of(loop: asyncio.AbstractEventLoop) -> _Hop:
    """The loop's one hop (made on the loop's thread, as `Progress` is)."""
    hop = _HOPS.get(loop)
    if hop is None:
        hop = _HOPS[loop] = _Hop(loop)
    return hop
