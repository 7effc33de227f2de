"""Prometheus metrics for one gateway instance, on its own registry (tests run several)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

# fine below 50 ms: the target for loop lag p99 is 20 ms and must be decidable from the buckets
_LAG_BUCKETS = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.05,
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
)  # fmt: skip
_RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TOKEN_KINDS = ("prompt_tokens", "completion_tokens")


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.received = Counter(
            "hermes_messages_received", "Inbound messages accepted", ["platform"], registry=r
        )
        self.answered = Counter(
            "hermes_messages_answered",
            "Inbound messages settled with a reply, by outcome",
            ["platform", "outcome"],
            registry=r,
        )
        self.dropped = Counter(
            "hermes_messages_dropped",
            "Inbound messages not processed (the sender was told why), by reason",
            ["platform", "reason"],
            registry=r,
        )
        self.duplicates = Counter(
            "hermes_messages_duplicate", "Redelivered messages ignored", ["platform"], registry=r
        )
        self.delivery_failures = Counter(
            "hermes_delivery_failures", "Replies that could not be sent", ["platform"], registry=r
        )
        self.run_duration = Histogram(
            "hermes_run_duration_seconds",
            "Agent run wall time",
            ["status"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.loop_lag = Histogram(
            "hermes_loop_lag_seconds", "Event-loop lag samples", buckets=_LAG_BUCKETS, registry=r
        )
        self.loop_lag_last = Gauge(
            "hermes_loop_lag_last_seconds", "The latest event-loop lag sample", registry=r
        )

        self.model_calls = Histogram(
            "hermes_model_call_duration_seconds",
            "Model requests (retries included) by outcome: ok, interrupted, error",
            ["outcome"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.model_errors = Counter(
            "hermes_model_errors",
            "Model requests that failed for good, by HTTP status (none: network/timeout)",
            ["status"],
            registry=r,
        )
        self.model_tokens = Counter(
            "hermes_model_tokens", "Tokens the model reported using", ["kind"], registry=r
        )
        ProcessCollector(registry=r)  # RSS, CPU, open fds: process_* as Prometheus names them
        PlatformCollector(registry=r)

    def model_call(self, data: Mapping[str, Any]) -> None:
        """One model request as the agent reports it (any thread: the client is thread-safe)."""
        outcome = str(data.get("outcome", "ok"))
        self.model_calls.labels(outcome).observe(float(data.get("seconds", 0.0)))
        if outcome == "error":
            self.model_errors.labels(str(data.get("status") or "none")).inc()
        for kind in _TOKEN_KINDS:
            value = data.get(kind)
            if isinstance(value, int) and value > 0:
                self.model_tokens.labels(kind.removesuffix("_tokens")).inc(value)

    def gauge(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        """A gauge read at scrape time (active sessions, pool use, ...)."""
        Gauge(name, doc, registry=self.registry).set_function(fn)

    def render(self) -> bytes:
        return generate_latest(self.registry)
