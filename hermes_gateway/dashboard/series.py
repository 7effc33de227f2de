"""The dashboard's time series: one hour of samples in fixed-size rings (memory allocated once,
never grown), and the Prometheus-style quantile of a histogram's bucket counts, kept within what
the observations can have been."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

WINDOW_S = 3600.0
SERIES = (
    "messages_per_min",  # messages accepted, per minute, over the interval
    "answer_p50_s",  # agent run wall time (accepted -> answer ready), p50 over the interval
    "answer_p99_s",
    "model_p50_s",  # model request latency
    "model_p99_s",
    "model_errors",  # model requests failed for good during the interval
    "loop_lag_p99_ms",  # event-loop lag p99 over the interval
    "pool_busy",  # pool threads running at the sample
    "active_sessions",  # sessions with a run at the sample
)


class Ring:
    """``capacity`` floats, oldest overwritten first; NaN marks "no value" (nothing observed)."""

    __slots__ = ("_data", "_next", "capacity", "filled")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._data = array("d", [math.nan]) * capacity
        self._next = 0
        self.filled = 0

    def push(self, value: float) -> None:
        self._data[self._next] = value
        self._next = (self._next + 1) % self.capacity
        self.filled = min(self.filled + 1, self.capacity)

    def values(self) -> list[float]:
        """Oldest first."""
        start = (self._next - self.filled) % self.capacity
        return [self._data[(start + i) % self.capacity] for i in range(self.filled)]

    def last(self) -> float:
        return self._data[(self._next - 1) % self.capacity] if self.filled else math.nan

    def nbytes(self) -> int:
        return self._data.itemsize * len(self._data)


class TimeSeries:
    """The last hour of every series in `SERIES`, sampled every ``interval_s`` seconds."""

    def __init__(self, interval_s: float, window_s: float = WINDOW_S) -> None:
        self.interval_s = interval_s
        self.capacity = max(2, math.ceil(window_s / interval_s))
        self.times = Ring(self.capacity)
        self.rings = {name: Ring(self.capacity) for name in SERIES}
        self.version = 0  # bumped at each sample, so a stream knows what it has sent

    def add(self, at: float, values: dict[str, float]) -> None:
        """One sample; a series missing from ``values`` gets NaN (no figure this interval)."""
        self.times.push(at)
        for name, ring in self.rings.items():
            ring.push(values.get(name, math.nan))
        self.version += 1

    def __len__(self) -> int:
        return self.times.filled

    def window(self) -> dict[str, list[float | None]]:
        """Every series oldest first, ``t`` the sample times (JSON-ready: NaN -> None)."""
        out: dict[str, list[float | None]] = {"t": _json(self.times.values())}
        for name, ring in self.rings.items():
            out[name] = _json(ring.values())
        return out

    def latest(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {"t": _one(self.times.last())}
        for name, ring in self.rings.items():
            out[name] = _one(ring.last())
        return out

    def nbytes(self) -> int:
        """Memory held by the samples: fixed once built, whatever was added."""
        return self.times.nbytes() + sum(r.nbytes() for r in self.rings.values())


def _one(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def _json(values: list[float]) -> list[float | None]:
    return [_one(v) for v in values]


def quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float:
    """Prometheus' histogram_quantile: ``counts`` are cumulative per upper bound (the last
    bound +Inf); linear within the bucket; NaN when nothing was observed."""
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return math.nan
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):  # in the overflow bucket: the highest finite bound
                return lower_bound
            inside = count - lower_count
            if inside <= 0:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / inside
        lower_bound, lower_count = bound, count
    return lower_bound


def observed_quantile(
    q: float, bounds: Sequence[float], counts: Sequence[float], total: float
) -> float:
    """`quantile`, held to what was observed: with one observation its value (the sum), and
    otherwise never above the most the largest observation can have been. Interpolating in a
    wide bucket draws one 15 s answer as p50 20 s / p99 29.8 s; the sum knows better."""
    value = quantile(q, bounds, counts)
    if math.isnan(value):
        return value
    if counts[-1] == 1:
        return max(total, 0.0)
    return min(value, largest_possible(bounds, counts, total))


def largest_possible(bounds: Sequence[float], counts: Sequence[float], total: float) -> float:
    """An upper bound on the largest observation: its bucket's upper bound, and the sum less
    the least every other observation can be (the lower bounds of their buckets)."""
    lower, below, floor_sum, top_lower, top = 0.0, 0.0, 0.0, 0.0, math.inf
    for bound, count in zip(bounds, counts, strict=True):
        inside = count - below
        if inside > 0:
            floor_sum += inside * lower
            top_lower, top = lower, bound
        lower, below = bound, count
    return min(top, total - floor_sum + top_lower)
