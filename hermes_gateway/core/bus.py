"""The in-process event bus: lifecycle events fanned out to side-effect subscribers.

`publish` never waits: each subscriber has its own ordered queue and worker, runs under a
timeout, and a failing or slow one is logged without touching the message or the others.
Sync subscribers run on a small dedicated executor, never on the loop thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from hermes_gateway.events import MessageEvent

log = structlog.get_logger("hermes.bus")

LIFECYCLE_EVENTS: tuple[str, ...] = (
    "message_received",
    "message_pending",
    "processing_start",
    "agent_run",
    "tool_event",
    "response_sent",
    "processing_complete",
    "error",
    "session_reset",
    "gateway_startup",
    "gateway_shutdown",
)
_KNOWN = frozenset(LIFECYCLE_EVENTS)


def _check_name(name: str) -> None:
    # a misspelt name would otherwise reach no subscriber and vanish without a trace; it is
    # a programming error, so it raises on every path (tests exercise each emit site)
    if name not in _KNOWN:
        raise ValueError(f"unknown lifecycle event: {name!r}")


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """One thing that happened; `message` is the inbound message it concerns, if any."""

    name: str
    session_key: str = ""
    run_id: str = ""
    message: MessageEvent | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)


Handler = Callable[[LifecycleEvent], Awaitable[None] | None]


class _Subscription:
    def __init__(
        self, bus: EventBus, handler: Handler, events: frozenset[str], name: str, timeout: float
    ) -> None:
        self.bus = bus
        self.handler = handler
        self.events = events
        self.name = name
        self.timeout = timeout
        self.is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)  # noqa: B004 - async callable objects
        )
        self.queue: asyncio.Queue[LifecycleEvent | None] = asyncio.Queue(bus.queue_max)
        self.task: asyncio.Task[None] | None = None
        self.failures = 0

    def offer(self, ev: LifecycleEvent) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._work(), name=f"bus:{self.name}"
            )
        try:
            self.queue.put_nowait(ev)
        except asyncio.QueueFull:
            log.warning("bus.subscriber_overflow", subscriber=self.name, dropped=ev.name)

    async def _work(self) -> None:
        while True:
            ev = await self.queue.get()
            if ev is None:
                return
            await self._deliver(ev)

    async def _deliver(self, ev: LifecycleEvent) -> None:
        started = time.monotonic()
        try:
            # `timeout`, not `wait_for`: no task per event (three per message for typing)
            async with asyncio.timeout(self.timeout):
                if self.is_async:
                    await self.handler(ev)  # type: ignore[misc]
                else:
                    loop = asyncio.get_running_loop()
                    ctx = contextvars.copy_context()
                    await loop.run_in_executor(self.bus.executor, ctx.run, self.handler, ev)
        except TimeoutError:
            self.failures += 1
            log.warning(
                "bus.subscriber_timeout",
                subscriber=self.name,
                lifecycle_event=ev.name,
                timeout_s=self.timeout,
            )
        except Exception:
            self.failures += 1
            log.exception("bus.subscriber_failed", subscriber=self.name, lifecycle_event=ev.name)
        else:
            elapsed = time.monotonic() - started
            if elapsed > self.timeout / 2:
                log.info("bus.subscriber_slow", subscriber=self.name, seconds=round(elapsed, 3))


class EventBus:
    """Publish/subscribe for `LIFECYCLE_EVENTS`; per-subscriber order is publish order."""

    def __init__(
        self, *, timeout: float = 5.0, executor: Executor | None = None, queue_max: int = 1000
    ) -> None:
        self.timeout = timeout
        self.queue_max = queue_max
        self._own_executor = executor is None
        self.executor = executor or ThreadPoolExecutor(2, thread_name_prefix="hermes-hook")
        self._subs: list[_Subscription] = []
        self._by_event: dict[str, list[_Subscription]] = {}
        self.closed = False

    def subscribe(
        self,
        handler: Handler,
        events: Iterable[str] | None = None,
        *,
        name: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Call ``handler(event)`` for each of ``events`` (all of them when None)."""
        wanted = frozenset(events) if events is not None else frozenset(LIFECYCLE_EVENTS)
        unknown = wanted - _KNOWN
        if unknown:
            raise ValueError(f"unknown lifecycle events: {sorted(unknown)}")
        sub = _Subscription(
            self,
            handler,
            wanted,
            name or str(getattr(handler, "__qualname__", repr(handler))),
            timeout or self.timeout,
        )
        self._subs.append(sub)
        for ev_name in wanted:
            self._by_event.setdefault(ev_name, []).append(sub)

    def has_subscribers(self, name: str) -> bool:
        return bool(self._by_event.get(name))

    def publish(self, ev: LifecycleEvent) -> None:
        """Hand ``ev`` to every interested subscriber; returns at once (loop thread only).

        Raises ValueError for a name not in `LIFECYCLE_EVENTS`, even after close.
        """
        _check_name(ev.name)
        if self.closed:
            return
        for sub in self._by_event.get(ev.name, ()):
            sub.offer(ev)

    def emit(self, name: str, message: MessageEvent | None = None, **data: Any) -> None:
        """Shorthand for `publish`; skips building the event when nobody listens.

        The name is checked first, so a misspelt one raises even when nobody listens.
        """
        _check_name(name)
        if not self._by_event.get(name):
            return
        run_id = str(data.pop("run_id", ""))
        key = message.session_key if message is not None else str(data.pop("session_key", ""))
        self.publish(LifecycleEvent(name, key, run_id, message, data))

    async def aclose(self, timeout: float = 2.0) -> None:
        """Let queued events drain (bounded), then stop the workers."""
        self.closed = True
        tasks = []
        for sub in self._subs:
            if sub.task is not None:
                try:
                    sub.queue.put_nowait(None)
                except asyncio.QueueFull:
                    sub.task.cancel()
                tasks.append(sub.task)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:  # let the cancellations land before the executor goes
                await asyncio.wait(pending, timeout=1.0)
        if self._own_executor:
            self.executor.shutdown(wait=False, cancel_futures=True)
