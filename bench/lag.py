"""Loop lag from the gateway's own `hermes_loop_lag_seconds` histogram: buckets scraped from
`/metrics` before and after a load, diffed, and a quantile read off them the way Prometheus'
`histogram_quantile` does (linear inside the bucket)."""

from __future__ import annotations

import math
import re
from typing import Any

METRIC = "hermes_loop_lag_seconds"
TARGET_S = 0.020  # the target: loop lag p99 < 20 ms under the 100-session load
# Bounds that would decide the 20 ms target and still show a 1 s stall.
SUGGESTED_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02)
SUGGESTED_BUCKETS += (0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_BUCKET = re.compile(rf'^{METRIC}_bucket\{{le="([^"]+)"\}} ([0-9.e+-]+)$')

Buckets = dict[float, float]  # upper bound (inf for +Inf) -> cumulative count


def parse(text: str) -> Buckets:
    """The cumulative bucket counts of the loop-lag histogram in a `/metrics` page."""
    out: Buckets = {}
    for line in text.splitlines():
        m = _BUCKET.match(line.strip())
        if m:
            out[float(m.group(1))] = float(m.group(2))  # float("+Inf") is inf
    return out


def diff(after: Buckets, before: Buckets) -> Buckets:
    return {le: after[le] - before.get(le, 0.0) for le in after}


def add(a: Buckets, b: Buckets) -> Buckets:
    return {le: a.get(le, 0.0) + b.get(le, 0.0) for le in set(a) | set(b)}


def quantile(q: float, buckets: Buckets) -> float | None:
    """`histogram_quantile(q, ...)`; None without samples, the top finite bound past it."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower  # past the last finite bound: that bound is all we know
            if count == below:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower


def bucket_of(q: float, buckets: Buckets) -> tuple[float, float]:
    """The (lower, upper] bounds of the bucket holding the ``q`` quantile."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    lower = 0.0
    for le in bounds:
        if buckets[le] >= q * total:
            return lower, le
        lower = le
    return lower, math.inf


def summary(buckets: Buckets) -> dict[str, Any]:
    """p99 in ms, its bucket, and whether the buckets can decide the < 20 ms target."""
    samples = int(max(buckets.values(), default=0))
    p99 = quantile(0.99, buckets)
    lower, upper = bucket_of(0.99, buckets) if samples else (0.0, 0.0)
    decidable = upper <= TARGET_S or lower >= TARGET_S
    finite = sorted(le for le in buckets if not math.isinf(le))
    return {
        "p99_ms": None if p99 is None else round(p99 * 1000, 2),
        "p99_bucket_ms": [round(lower * 1000, 2), None if math.isinf(upper) else upper * 1000],
        "samples": samples,
        "max_bucket_ms": _max_bucket(buckets),
        "over_top_bucket": int(samples - max((buckets[le] for le in finite), default=0)),
        "buckets_ms": [round(le * 1000, 2) for le in finite],
        "decides_20ms_target": decidable,
        "suggested_buckets_s": list(SUGGESTED_BUCKETS) if not decidable else None,
    }


def _max_bucket(buckets: Buckets) -> float | None:
    """The upper bound (ms) of the highest finite bucket that got a sample: the worst lag
    seen, to that resolution (samples past the top bound show in `over_top_bucket`)."""
    previous = 0.0
    worst: float | None = None
    for le in sorted(b for b in buckets if not math.isinf(b)):
        if buckets[le] > previous:
            worst = round(le * 1000, 2)
        previous = buckets[le]
    return worst
