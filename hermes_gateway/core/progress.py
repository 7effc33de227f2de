"""A run's progress, carried from the agent's thread to the loop: the streamed text and the
tool notes to the platform's stream sink, tool events to the bus, model calls to the metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from hermes_gateway.core.bus import EventBus
from hermes_gateway.events import MessageEvent
from hermes_gateway.metrics import Metrics
from hermes_gateway.platforms.adapter import StreamSink


class Progress:
    """`delta` and `event` are the agent's callbacks and run on its thread. Text and tool
    notes take the same hop to the loop, so the sink gets them in the order they happened;
    the bus's subscribers then take each tool event at their own pace."""

    def __init__(
        self,
        message: MessageEvent,
        run_id: str,
        stopped: Callable[[], bool],
        sink: StreamSink | None,
        *,
        bus: EventBus,
        metrics: Metrics,
    ) -> None:
        self.message = message  # the one the run answers
        self.run_id = run_id
        self.stopped = stopped  # a stopped run's late progress is nobody's
        self.sink = sink
        self.bus = bus
        self.metrics = metrics
        self.loop = asyncio.get_running_loop()

    def delta(self, text: str) -> None:
        if self.sink is not None and not self.stopped():
            self.loop.call_soon_threadsafe(self.sink.push, text)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "model_call":
            self.metrics.model_call(data)  # counted here: it needs no hop to the loop
        else:
            self.loop.call_soon_threadsafe(self._tool_event, kind, data)

    def _tool_event(self, kind: str, data: dict[str, Any]) -> None:
        if self.stopped():
            return
        if self.sink is not None and (tool := data.get("tool")):
            self.sink.tool(str(tool), "start" if kind == "tool_start" else "end", data.get("ok"))
        self.bus.emit("tool_event", self.message, run_id=self.run_id, kind=kind, **data)
