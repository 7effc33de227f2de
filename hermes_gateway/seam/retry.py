"""The one retry helper for platform calls: honour `retry_after`, back off x1.5 (with jitter)
up to a cap on transient failures, give up at once on permanent ones, race a stop event."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from hermes_gateway.errors import RateLimitedError, TransientAdapterError

log = structlog.get_logger("hermes.retry")
T = TypeVar("T")


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
    delay = base_delay
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except RateLimitedError as exc:
            if attempt == attempts or exc.retry_after > max_retry_after:
                raise
            wait = exc.retry_after + random.uniform(0, 0.1)
            log.warning("retry.rate_limited", what=what, retry_after=exc.retry_after)
            if await _sleep(wait, stop):
                raise
        except TransientAdapterError as exc:
            if attempt == attempts:
                raise
            wait = min(max_delay, delay) * random.uniform(0.8, 1.2)
            delay *= 1.5
            log.warning("retry.transient", what=what, attempt=attempt, error=str(exc))
            if await _sleep(wait, stop):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _sleep(seconds: float, stop: asyncio.Event | None) -> bool:
    """Sleep; True if ``stop`` was set meanwhile."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(stop.wait(), seconds)
        return True
    except TimeoutError:
        return False
