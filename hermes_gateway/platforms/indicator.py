"""The typing indicator: refreshed while a run works, always stopped when it ends.

Driven by the bus (`processing_start` starts it after a short grace, `response_sent` /
`processing_complete` stop it), so adapters only supply the platform call; a hard cap stops it
even if an end event is ever missed.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

from hermes_gateway.events import MessageEvent

if TYPE_CHECKING:
    from hermes_gateway.core.bus import EventBus, LifecycleEvent

log = structlog.get_logger("hermes.indicator")
SendTyping = Callable[[MessageEvent], Awaitable[None]]


class TypingIndicator:
    def __init__(
        self,
        bus: EventBus,
        platform: str,
        send_typing: SendTyping,
        *,
        interval: float = 5.0,
        max_duration: float = 600.0,
        first_after: float = 0.4,
    ) -> None:
        self.platform = platform
        self._send = send_typing
        self.interval = interval
        # a reply faster than this is its own feedback: no indicator, no extra platform call
        self.first_after = first_after
        self.max_duration = max_duration
        self._tasks: dict[str, asyncio.Task[None]] = {}
        bus.subscribe(
            self._on_event,
            ["processing_start", "response_sent", "processing_complete"],
            name=f"typing:{platform}",
        )

    @property
    def active(self) -> int:
        return len(self._tasks)

    async def _on_event(self, ev: LifecycleEvent) -> None:
        if ev.message is None or ev.message.platform != self.platform:
            return
        if ev.name == "processing_start":
            if ev.run_id not in self._tasks:
                task = asyncio.create_task(
                    self._keep_typing(ev.message), name=f"typing:{ev.run_id}"
                )
                self._tasks[ev.run_id] = task
                task.add_done_callback(functools.partial(self._forget, ev.run_id))
        else:
            self.stop(ev.run_id)

    def _forget(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(run_id) is task:
            del self._tasks[run_id]

    def stop(self, run_id: str) -> None:
        task = self._tasks.pop(run_id, None)
        if task is not None:
            task.cancel()

    def stop_all(self) -> None:
        for run_id in list(self._tasks):
            self.stop(run_id)

    async def _keep_typing(self, message: MessageEvent) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_duration
        try:
            await asyncio.sleep(self.first_after)
            while loop.time() < deadline:
                try:
                    await self._send(message)
                except Exception as exc:  # a failed indicator must never affect the reply
                    log.debug("typing.failed", platform=self.platform, error=str(exc))
                await asyncio.sleep(self.interval)
        finally:
            log.debug("typing.stopped", platform=self.platform, chat_id=message.chat_id)
