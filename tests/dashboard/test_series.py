"""The dashboard's time series: an hour of samples in memory allocated once, and figures that
agree with what `/metrics` says over the same interval."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hermes_gateway.dashboard.sampler import Sampler
from hermes_gateway.dashboard.series import SERIES, Ring, TimeSeries, observed_quantile, quantile
from hermes_gateway.metrics import Metrics


def test_a_ring_keeps_the_newest_values_in_fixed_memory() -> None:
    ring = Ring(5)
    size = ring.nbytes()
    for n in range(17):
        ring.push(float(n))
    assert ring.values() == [12.0, 13.0, 14.0, 15.0, 16.0]
    assert ring.last() == 16.0 and ring.filled == 5 and ring.nbytes() == size


def test_the_store_holds_one_hour_and_never_grows() -> None:
    series = TimeSeries(interval_s=5)
    assert series.capacity == 720  # 3600 s / 5 s
    empty = series.nbytes()
    assert empty == 720 * 8 * (len(SERIES) + 1)  # 720 doubles per series and the times
    for n in range(3 * series.capacity):  # three hours of samples
        series.add(1000.0 + 5 * n, {"messages_per_min": float(n)})
    window = series.window()
    assert len(series) == series.capacity == len(window["t"])
    assert series.nbytes() == empty
    t = window["t"]
    assert t[-1] - t[0] == pytest.approx(3600 - 5)  # the last hour, oldest first
    assert window["messages_per_min"][-1] == 3 * series.capacity - 1
    assert window["model_errors"][-1] is None  # not given: no figure, not zero


def test_quantile_interpolates_like_prometheus() -> None:
    bounds = [0.1, 0.5, 1.0, math.inf]
    assert quantile(0.5, bounds, [0, 10, 10, 10]) == pytest.approx(0.3)
    assert quantile(0.99, bounds, [0, 0, 0, 4]) == 1.0  # all in the overflow: highest bound
    assert math.isnan(quantile(0.5, bounds, [0, 0, 0, 0]))


def _scrape(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _total(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in scrape.items() if n == name)


def _histogram_quantile(q: float, before: dict, after: dict, name: str) -> float:
    """histogram_quantile(q, sum by (le) (increase(name_bucket))) from two scrapes."""
    counts: dict[float, float] = {}
    for (n, labels), v in after.items():
        if n == f"{name}_bucket":
            le = float(dict(labels)["le"])
            counts[le] = counts.get(le, 0.0) + v - before.get((n, labels), 0.0)
    bounds = sorted(counts)
    cum = [counts[b] for b in bounds]
    rank = q * cum[-1]
    prev_b, prev_c = 0.0, 0.0
    for b, c in zip(bounds, cum, strict=True):
        if c >= rank:
            if math.isinf(b):
                return prev_b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c)
        prev_b, prev_c = b, c
    raise AssertionError("unreachable")


def test_a_sample_agrees_with_metrics_over_the_same_interval() -> None:
    metrics = Metrics()
    now = [1000.0]
    series = TimeSeries(interval_s=10)
    sampler = Sampler(metrics, series, lambda: {"pool_busy": 3.0}, clock=lambda: now[0])
    metrics.received.labels("api").inc(2)  # before the first reading: not in the sample
    sampler.restart()
    before = _scrape(metrics)
    metrics.received.labels("api").inc(7)
    metrics.received.labels("telegram").inc(5)
    for seconds in (0.2, 0.3, 0.7, 1.5, 4.0, 40.0):
        metrics.run_duration.labels("done").observe(seconds)
    metrics.run_duration.labels("failed").observe(2.0)
    for outcome, seconds in (("ok", 0.4), ("ok", 0.9), ("error", 3.0)):
        metrics.model_call({"outcome": outcome, "seconds": seconds, "status": 500})
    for lag in (0.001, 0.002, 0.004, 0.03):
        metrics.loop_lag.observe(lag)
    now[0] += 30.0
    values = sampler.sample()
    after = _scrape(metrics)

    received = _total(after, "hermes_messages_received_total") - _total(
        before, "hermes_messages_received_total"
    )
    assert received == 12
    assert values["messages_per_min"] == pytest.approx(received * 60 / 30)
    # the p50s as Prometheus says; the p99s fall in the top answer's (40 s) and top model
    # call's (3 s) wide buckets, where interpolating would go past what the sums allow
    for name, prefix, largest in (("run", "answer", 40.0), ("model_call", "model", 3.0)):
        family = f"hermes_{name}_duration_seconds"
        want = _histogram_quantile(0.5, before, after, family)
        assert values[f"{prefix}_p50_s"] == pytest.approx(want)
        want = _histogram_quantile(0.99, before, after, family)
        assert largest <= values[f"{prefix}_p99_s"] < want
    lag = _histogram_quantile(0.99, before, after, "hermes_loop_lag_seconds")
    assert values["loop_lag_p99_ms"] == pytest.approx(lag * 1000)
    assert values["model_errors"] == _total(after, "hermes_model_errors_total") == 1
    assert values["pool_busy"] == 3.0
    latest = series.latest()
    assert latest["t"] == 1030.0 and latest["messages_per_min"] == pytest.approx(24.0)

    now[0] += 10.0  # nothing happened: a rate of zero, and no latency figure at all
    quiet = sampler.sample()
    assert quiet["messages_per_min"] == 0 and math.isnan(quiet["answer_p99_s"])
    assert series.window()["answer_p99_s"] == [pytest.approx(values["answer_p99_s"]), None]


def test_with_few_samples_the_charts_show_what_was_observed_not_bucket_interpolation() -> None:
    metrics = Metrics()
    now = [1000.0]
    sampler = Sampler(metrics, TimeSeries(interval_s=5), dict, clock=lambda: now[0])
    metrics.run_duration.labels("done").observe(15.03)  # one answer: bucket (10, 30]
    metrics.model_call({"outcome": "ok", "seconds": 2.5})
    now[0] += 5.0
    values = sampler.sample()
    for key in ("answer_p50_s", "answer_p99_s"):
        assert values[key] == pytest.approx(15.03)  # not 20.0 / 29.8
    assert values["model_p50_s"] == values["model_p99_s"] == pytest.approx(2.5)
    for seconds in (15.03, 16.0):  # two in one bucket: no quantile above the largest
        metrics.run_duration.labels("done").observe(seconds)
    now[0] += 5.0
    values = sampler.sample()
    assert 10.0 <= values["answer_p50_s"] <= values["answer_p99_s"] <= 16.0 + 5.03


def test_a_quantile_never_exceeds_what_the_sum_allows() -> None:
    bounds = [1.0, 10.0, 30.0, math.inf]
    assert observed_quantile(0.99, bounds, [0, 0, 1, 1], 15.03) == pytest.approx(15.03)
    # ten answers of 11 s: the largest is at most 110 - 9 * 10 = 20 s, not 29.8 s
    assert observed_quantile(0.99, bounds, [0, 0, 10, 10], 110.0) == pytest.approx(20.0)
    # many in the buckets, the sum allowing more: Prometheus' figure as it is
    assert observed_quantile(0.5, bounds, [0, 10, 10, 10], 80.0) == quantile(
        0.5, bounds, [0, 10, 10, 10]
    )
    assert math.isnan(observed_quantile(0.5, bounds, [0, 0, 0, 0], 0.0))
