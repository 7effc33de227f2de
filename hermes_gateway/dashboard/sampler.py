"""Feeds the dashboard's time series from the same metric objects `/metrics` renders: every
interval it reads the counters and histograms (their buckets and their sums), and stores what
changed since the last read."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Counter, Histogram

from hermes_gateway.dashboard.series import TimeSeries, observed_quantile
from hermes_gateway.metrics import Metrics

Buckets = dict[float, float]  # upper bound -> cumulative count, summed over the labels


@dataclass(frozen=True, slots=True)
class Hist:
    """A histogram summed over its labels: cumulative bucket counts and the observations' sum."""

    buckets: Buckets = field(default_factory=dict)
    total: float = 0.0


@dataclass(frozen=True, slots=True)
class Reading:
    """The cumulative figures at one moment."""

    received: float = 0.0
    model_errors: float = 0.0
    runs: Hist = field(default_factory=Hist)
    model: Hist = field(default_factory=Hist)
    lag: Hist = field(default_factory=Hist)


def counter_total(counter: Counter) -> float:
    return sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))


def histogram_buckets(histogram: Histogram) -> Hist:
    out: Buckets = {}
    total = 0.0
    for metric in histogram.collect():
        for s in metric.samples:
            if s.name.endswith("_bucket"):
                bound = float(s.labels["le"])
                out[bound] = out.get(bound, 0.0) + s.value
            elif s.name.endswith("_sum"):
                total += s.value
    return Hist(out, total)


def read(metrics: Metrics) -> Reading:
    return Reading(
        received=counter_total(metrics.received),
        model_errors=counter_total(metrics.model_errors),
        runs=histogram_buckets(metrics.run_duration),
        model=histogram_buckets(metrics.model_calls),
        lag=histogram_buckets(metrics.loop_lag),
    )


def delta_quantile(q: float, before: Hist, after: Hist) -> float:
    """The ``q`` quantile of what was observed between two readings (see `observed_quantile`:
    exact for one observation, never above what the largest one can have been)."""
    bounds = sorted(after.buckets)
    counts = [after.buckets[b] - before.buckets.get(b, 0.0) for b in bounds]
    return observed_quantile(q, bounds, counts, after.total - before.total)


def figures(before: Reading, after: Reading, seconds: float) -> dict[str, float]:
    """What happened between two readings ``seconds`` apart, as the series store it."""
    lag = delta_quantile(0.99, before.lag, after.lag)
    return {
        "messages_per_min": (after.received - before.received) * 60.0 / max(seconds, 1e-9),
        "answer_p50_s": delta_quantile(0.5, before.runs, after.runs),
        "answer_p99_s": delta_quantile(0.99, before.runs, after.runs),
        "model_p50_s": delta_quantile(0.5, before.model, after.model),
        "model_p99_s": delta_quantile(0.99, before.model, after.model),
        "model_errors": after.model_errors - before.model_errors,
        "loop_lag_p99_ms": lag * 1000.0 if not math.isnan(lag) else math.nan,
    }


class Sampler:
    """Samples every ``series.interval_s`` on the loop; a read is a few dozen numbers."""

    def __init__(
        self,
        metrics: Metrics,
        series: TimeSeries,
        gauges: Callable[[], dict[str, float]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.metrics = metrics
        self.series = series
        self.gauges = gauges
        self.clock = clock
        self._last = read(metrics)
        self._last_at = clock()
        self.changed = asyncio.Event()  # set at each sample; streams clear their own view

    def restart(self) -> None:
        """Measure from now on (what came before the gateway was ready is not charted)."""
        self._last, self._last_at = read(self.metrics), self.clock()

    def sample(self) -> dict[str, float]:
        now_reading, now = read(self.metrics), self.clock()
        values = figures(self._last, now_reading, now - self._last_at)
        values.update(self.gauges())
        self._last, self._last_at = now_reading, now
        self.series.add(now, values)
        self.changed.set()
        self.changed = asyncio.Event()  # waiters hold the old, now set, event
        return values

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.series.interval_s)
            self.sample()
