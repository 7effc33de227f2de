"""The typing indicator: refreshed while a run works, always stopped when it ends.

Driven by the bus (`processing_start` starts it after a short grace, `response_sent` /
`processing_complete` stop it), so adapters only supply the platform call; a hard cap stops it
even if an end event is ever missed, and a budget of calls per second keeps a crowd's
indicators from taking the platform's rate the replies need.
"""

from __future__ import annotations

import asyncio
import functools
import random
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
        per_second: float = 20.0,
    ) -> None:
        self.platform = platform
        self._send = send_typing
        self.interval = interval
        # a reply faster than this is its own feedback: no indicator, no extra platform call
        self.first_after = first_after
        self.max_duration = max_duration
        # a platform counts typing calls against the bot's rate (Telegram's is about 30 calls a
        # second): a thousand runs starting at once would otherwise spend a thousand calls, then
        # as many every interval, delaying the replies (and on a 2-core host costing a second of
        # the loop's time at each round). Over the budget a chat's call is skipped, tried again
        # within a second or two: the indicator is best effort, the reply is not.
        self._budget = _Budget(per_second)
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
                if not self._budget.take(loop.time()):
                    await asyncio.sleep(min(self.interval, random.uniform(0.5, 1.5)))
                    continue
                try:
                    await self._send(message)
                except Exception as exc:  # a failed indicator must never affect the reply
                    log.debug("typing.failed", platform=self.platform, error=str(exc))
                await asyncio.sleep(self.interval)
        finally:
            log.debug("typing.stopped", platform=self.platform, chat_id=message.chat_id)


class _Budget:
    """A token bucket: ``per_second`` calls a second, as many at once at most."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self._tokens = per_second
        self._at: float | None = None

    def take(self, now: float) -> bool:
        if self._at is not None:
            self._tokens = min(self.per_second, self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
