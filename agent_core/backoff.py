"""Waiting between attempts, once for the whole gateway: `Backoff` (a first wait, times a factor
up to a cap, jittered) and `retry_after_s`, the one reader of an HTTP `Retry-After` value. The
model client uses them here; the platforms get them through `hermes_gateway.platforms`."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any


@dataclass(slots=True)
class Backoff:
    """Waits between attempts: ``first``, then times ``factor`` up to ``cap``, each spread by
    +-``jitter`` (so gateways that lost a platform together do not come back in step)."""

    first: float = 1.0
    cap: float = 60.0
    factor: float = 2.0
    jitter: float = 0.1
    rng: Callable[[float, float], float] = random.uniform
    _base: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._base = self.first

    def next(self) -> float:
        wait, self._base = self._base, min(self.cap, self._base * self.factor)
        if self.jitter:
            wait *= self.rng(1 - self.jitter, 1 + self.jitter)
        return min(self.cap, wait)

    def reset(self) -> None:
        self._base = self.first


def retry_after_s(
    value: Any,
    default: float = 1.0,
    cap: float | None = None,
    now: Callable[[], float] = time.time,
) -> float:
    """Seconds a `Retry-After` value asks for: a number of seconds or an HTTP date (RFC 9110),
    as a string, a number, or a header list's first item; never negative, at most ``cap``.
    ``default`` when it is missing or unreadable (a server that says "later" but not when)."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if value is None or isinstance(value, bool):
        return default
    seconds = _seconds(value, now)
    if seconds is None:
        return default
    seconds = max(0.0, seconds)
    return min(seconds, cap) if cap is not None else seconds


def header(headers: Mapping[str, Any] | None, name: str = "Retry-After") -> Any:
    """A header's value whatever the case of its name (some clients hand a plain dict)."""
    for key, value in (headers or {}).items():
        if str(key).lower() == name.lower():
            return value
    return None


def _seconds(value: Any, now: Callable[[], float]) -> float | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        pass
    else:
        return seconds if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is read as such
        return None
    return when.timestamp() - now()
