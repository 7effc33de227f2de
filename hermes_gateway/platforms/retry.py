"""The one retry helper for platform calls: honour `retry_after`, back off x1.5 (with jitter)
up to a cap on transient failures, give up at once on permanent ones, race a stop event (the
sleep that does is shared with the live preview and the connection supervisor). The one
`Retry-After` reader and `Backoff` are `agent_core.backoff`'s, offered to the platforms here."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import structlog

from agent_core.backoff import Backoff, header, retry_after_s
from hermes_gateway.errors import RateLimitedError, TransientAdapterError

log = structlog.get_logger("hermes.retry")
T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class Tally:
    """What the retries of the calls made inside `tallied` cost: retries, of which the platform
    asked for (rate limited), and the seconds spent waiting between attempts."""

    retries: int = 0
    rate_limited: int = 0
    waited_s: float = 0.0

    def count(self, seconds: float, rate_limited: bool) -> None:
        """One more retry, after ``seconds`` of waiting (the platform asked: ``rate_limited``)."""
        self.retries += 1
        self.rate_limited += rate_limited
        self.waited_s += seconds


_TALLY: ContextVar[Tally | None] = ContextVar("hermes_retry_tally", default=None)


@contextmanager
def tallied() -> Iterator[Tally]:
    """Count the retries of every `with_retry` call in the block (the reply skeleton's part
    spans carry them; a context variable, so no platform passes anything through)."""
    token = _TALLY.set(tally := Tally())
    try:
        yield tally
    finally:
        _TALLY.reset(token)


async def with_retry(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    max_retry_after: float = 300.0,
    stop: asyncio.Event | None = None,
) -> T:
    """Run ``call`` until it succeeds, a permanent error is raised, or ``attempts`` run out.

    `RateLimitedError` waits what the platform asked (capped at ``max_retry_after``);
    `TransientAdapterError` backs off; any other exception propagates at once. A set ``stop``
    event ends the waiting early and re-raises the last error.
    """
    backoff = Backoff(base_delay, max_delay, factor=1.5, jitter=0.2)
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except RateLimitedError as exc:
            if attempt == attempts or exc.retry_after > max_retry_after:
                raise
            wait = exc.retry_after + random.uniform(0, 0.1)
            log.warning("retry.rate_limited", what=what, retry_after=exc.retry_after)
            if await _wait(stop, wait, rate_limited=True):
                raise
        except TransientAdapterError as exc:
            if attempt == attempts:
                raise
            wait = backoff.next()
            log.warning("retry.transient", what=what, attempt=attempt, error=str(exc))
            if await _wait(stop, wait, rate_limited=False):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _wait(stop: asyncio.Event | None, seconds: float, *, rate_limited: bool) -> bool:
    """`sleep_unless`, counted in the current `Tally` if there is one."""
    tally = _TALLY.get()
    if tally is None:
        return await sleep_unless(stop, seconds)
    began = time.monotonic()
    try:
        return await sleep_unless(stop, seconds)
    finally:
        tally.count(time.monotonic() - began, rate_limited)


async def sleep_unless(
    stop: asyncio.Event | None, seconds: float, sleep: Sleep = asyncio.sleep
) -> bool:
    """Sleep ``seconds`` (with ``sleep``: tests pass a manual clock's) unless ``stop`` is set
    first; True if it was."""
    if stop is None:
        await sleep(seconds)
        return False
    sleeper = asyncio.ensure_future(sleep(seconds))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        stopper.cancel()
    return stop.is_set()


__all__ = ["Sleep", "Tally", "header", "retry_after_s", "sleep_unless", "tallied", "with_retry"]
