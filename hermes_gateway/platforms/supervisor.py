"""The one reconnect loop for platform connections: runs a platform's `connect_once` again and
again with a growing, jittered, capped backoff (reset once a connection was healthy), keeps the
`Health` that `/readyz` reads, restarts a connection that makes no progress, and stops cleanly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from agent_core.backoff import Backoff
from hermes_gateway.platforms.adapter import Health
from hermes_gateway.platforms.retry import Sleep, sleep_unless

log = structlog.get_logger("hermes.supervisor")
# (failures in a row, the last error, seconds until the next attempt) -> the health detail
Describe = Callable[[int, BaseException, float], str]


class GiveUp(Exception):
    """Raised by `connect_once` when retrying cannot help (a rejected token): the supervisor
    stops, its health keeps ``detail``, and `Supervisor.fatal` is this error's cause."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class RetryLater(Exception):
    """Raised by `connect_once` for what is not a failure (another process holds the token's
    lock, a reconnect with other options): try again after ``after`` seconds, backoff unchanged."""

    def __init__(self, after: float, detail: str = "") -> None:
        super().__init__(detail)
        self.after = after
        self.detail = detail


@dataclass(frozen=True, slots=True)
class StallWatch:
    """Restart a ready connection that made no progress for ``after`` seconds, checked every
    ``interval``: ``idle`` says for how long (by default, since `Supervisor.progress`), and the
    restart is logged as ``event`` (by default ``<platform>.stalled``)."""

    after: float
    idle: Callable[[], float] | None = None
    interval: float = 1.0
    event: str = ""


def _describe(failures: int, exc: BaseException, wait: float) -> str:
    return f"not connected ({failures}x: {type(exc).__name__}: {exc}); next try in {wait:.1f} s"


async def hold() -> None:
    """The rest of a `connect_once` whose connection needs no loop of ours (a webhook, an SDK
    that reconnects by itself): it lasts until the supervisor stops."""
    await asyncio.get_running_loop().create_future()


async def first_of(*tasks: asyncio.Future[Any]) -> set[asyncio.Future[Any]]:
    """Wait for the first of ``tasks`` to end, then cancel the others and wait for them to end
    too, also when this wait is itself cancelled (a connection's work racing its watch, or
    the loss of its lead). Returns those that ended first; what each did is read from it."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return done


class Supervisor:
    """Keeps one platform connected. ``connect_once`` connects and returns when the connection
    ends (a crash raises); the platform reports `ready` and `down` as it sees them, and with a
    `StallWatch` its progress."""

    def __init__(
        self,
        name: str,
        connect_once: Callable[[], Awaitable[None]],
        *,
        backoff: Backoff,
        describe: Describe = _describe,
        healthy_after: float = 0.0,
        stall: StallWatch | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.connect_once = connect_once
        self.backoff = backoff
        self.describe = describe
        self.healthy_after = healthy_after  # ready this long: the next failure starts afresh
        self.stall = stall
        self.health = Health(False, "not started")
        self.failures = 0  # in a row
        self.fatal: BaseException | None = None  # why it gave up
        self._sleep, self._clock = sleep, clock
        self._ready_at: float | None = None  # when this connection was first ready
        self._progress_at = clock()
        self._attempted = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- what the platform calls ------------------------------------------------------------

    def start(self, first_delay: float = 0.0) -> None:
        self._stopping.clear()
        self._task = asyncio.create_task(self._loop(first_delay), name=f"adapter:{self.name}")
        self._task.add_done_callback(self._done)

    async def settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the first attempt's outcome (connected, failed, gave up)."""
        try:
            await asyncio.wait_for(self._attempted.wait(), timeout)
        except TimeoutError:
            pass

    async def stop(self, detail: str = "stopped") -> None:
        """Stop reconnecting and end the connection in progress (a pause included)."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._set(False, detail)

    def ready(self, detail: str) -> None:
        if self._ready_at is None:
            self._ready_at = self._clock()
        self._progress_at = self._clock()
        self._set(True, detail)
        self._attempted.set()

    def down(self, detail: str) -> None:
        self._set(False, detail)

    def progress(self) -> None:
        self._progress_at = self._clock()

    # -- the loop ---------------------------------------------------------------------------

    async def _loop(self, first_delay: float) -> None:
        if first_delay and await sleep_unless(self._stopping, first_delay, self._sleep):
            return
        while not self._stopping.is_set():
            wait = await self._once()
            if wait is None or await sleep_unless(self._stopping, wait, self._sleep):
                return

    async def _once(self) -> float | None:
        """One connection, start to end; the wait before the next, None to give up."""
        self._ready_at, self._progress_at = None, self._clock()
        try:
            await self._session()
        except GiveUp as exc:
            self.fatal = exc.__cause__ or exc
            self._set(False, exc.detail)
            self._attempted.set()
            return None
        except RetryLater as exc:
            if exc.detail:
                self._set(False, exc.detail)
            self._attempted.set()
            return exc.after
        except Exception as exc:
            return self._failed(exc)
        if self._was_healthy():
            self.backoff.reset()
            self.failures = 0
        wait = self.backoff.next()
        if not self._stopping.is_set():
            if self.health.ready:  # else the platform said why it ended
                self._set(False, "connection ended; reconnecting")
            log.info(f"{self.name}.restarting", in_s=round(wait, 2))
        return wait

    def _failed(self, exc: Exception) -> float:
        if self._was_healthy():
            self.backoff.reset()
            self.failures = 0
        self.failures += 1
        wait = self.backoff.next()
        self._set(False, self.describe(self.failures, exc, wait))
        error = f"{type(exc).__name__}: {exc}"
        log.warning(
            f"{self.name}.connect_failed", attempt=self.failures, error=error, in_s=round(wait, 2)
        )
        self._attempted.set()
        return wait

    def _was_healthy(self) -> bool:
        ready_at = self._ready_at
        return ready_at is not None and self._clock() - ready_at >= self.healthy_after

    async def _session(self) -> None:
        """Run ``connect_once``, restarted (as a failure) when it makes no progress."""
        conn = asyncio.ensure_future(self.connect_once())
        watch = asyncio.ensure_future(self._watch())
        await first_of(conn, watch)
        if watch.done() and not watch.cancelled() and (stalled := watch.result()) is not None:
            raise stalled
        if conn.cancelled():  # cancelled by something other than `stop`
            raise RuntimeError("the connection task was cancelled")
        conn.result()

    async def _watch(self) -> Exception | None:
        """Returns an error once a ready connection made no progress for too long."""
        stall = self.stall
        if stall is None:
            await hold()
            return None  # pragma: no cover - hold() ends only by cancellation
        while True:
            await self._sleep(stall.interval)
            if self._ready_at is None:
                continue  # only a live connection can stall
            idle = stall.idle() if stall.idle is not None else self._clock() - self._progress_at
            if idle >= stall.after:
                log.error(stall.event or f"{self.name}.stalled", idle_s=round(idle, 1))
                return TimeoutError(f"no progress for {idle:.0f} s")

    def _set(self, ready: bool, detail: str) -> None:
        if ready != self.health.ready:  # each change once; details alone change quietly
            log.info("adapter.health", platform=self.name, ready=ready, detail=detail)
        self.health = Health(ready, detail)

    def _done(self, task: asyncio.Task[None]) -> None:
        """The loop itself failed (a bug): say so and start it again."""
        if self._stopping.is_set() or task.cancelled() or task.exception() is None:
            return
        log.error(f"{self.name}.supervisor_died", error=repr(task.exception()))
        self._set(False, "connection supervisor died; restarting")
        asyncio.get_running_loop().call_later(self.backoff.first, self._restart)

    def _restart(self) -> None:
        if not self._stopping.is_set():
            self.start()


__all__ = ["Backoff", "GiveUp", "RetryLater", "StallWatch", "Supervisor", "first_of", "hold"]
