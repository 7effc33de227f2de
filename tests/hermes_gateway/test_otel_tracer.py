"""The OpenTelemetry tracer's own paths, exported to a test collector: a span recorded after
it ended (a model call) joins its parent's trace as a live span would, is sampled as its
parent is, and the traceparent kept with a message is the W3C propagator's."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import pytest

from hermes_gateway.config.schema import TracesConfig
from hermes_gateway.events import MessageEvent
from hermes_gateway.metrics import Metrics
from tests.fakes.otlp import Receiver, attrs

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace.propagation.tracecontext import (
    TraceContextTextMapPropagator,
)

from hermes_gateway.traces import active
from hermes_gateway.traces.otel import OtelTracer

EVENT = MessageEvent(
    platform="telegram",
    chat_type="dm",
    chat_id="1",
    user_id="2",
    message_id="3",
    text="a secret question",
    session_key="telegram:dm:1",
)


def _tracer(receiver: Receiver, ratio: float = 1.0) -> OtelTracer:
    config = TracesConfig(enabled=True, endpoint=receiver.endpoint, sample_ratio=ratio)
    return OtelTracer(config, Metrics(), "test-instance")


def _exported(receiver: Receiver) -> dict[str, Any]:
    with receiver.lock:
        return {span.name: (resource, span) for resource, span in receiver.spans}


def test_an_ended_span_joins_its_parents_trace(receiver: Receiver) -> None:
    tracer = _tracer(receiver)
    with tracer.message(EVENT), tracer.span("admission", {}):
        tracer.finished("model.call", 0.25, {"hermes.model.model": "m", "hermes.model.attempt": 1})
    tracer.finished("tool.call", 0.1, {"hermes.tool.tool": "clock"})  # no span current
    tracer.shutdown()
    spans = _exported(receiver)
    assert set(spans) == {"message", "admission", "model.call", "tool.call"}
    _, admission = spans["admission"]
    resource, call = spans["model.call"]
    assert call.trace_id == admission.trace_id
    assert call.parent_span_id == admission.span_id
    assert call.span_id not in {admission.span_id, spans["message"][1].span_id}
    assert attrs(call) == {"hermes.model.model": "m", "hermes.model.attempt": 1}
    assert (call.end_time_unix_nano - call.start_time_unix_nano) == pytest.approx(0.25e9, rel=0.01)
    assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.instance.id"] == (
        "test-instance"
    )
    _, alone = spans["tool.call"]  # a root of its own, decided by the sampler
    assert alone.parent_span_id == b""
    assert alone.trace_id != admission.trace_id


def test_live_and_ended_spans_share_one_scope(receiver: Receiver) -> None:
    tracer = _tracer(receiver)
    with tracer.message(EVENT):
        tracer.finished("model.call", 0.1, {})
    tracer.shutdown()
    with receiver.lock:  # one batch: both spans under one resource and one scope
        assert len(receiver.spans) == 2
        assert receiver.scopes == ["hermes_gateway"]


def test_an_unsampled_parent_keeps_its_ended_children_out(receiver: Receiver) -> None:
    tracer = _tracer(receiver, ratio=0.0)
    with tracer.message(EVENT):
        tracer.finished("model.call", 0.1, {})
        waited = tracer.waited(lambda: 7)
        assert waited() == 7
    tracer.shutdown()
    assert _exported(receiver) == {}


def test_traceparent_is_the_w3c_propagators() -> None:
    tracer = OtelTracer(TracesConfig(enabled=True), Metrics(), "i")
    assert tracer.traceparent() == ""  # no span current
    with tracer.message(EVENT):
        ours = tracer.traceparent()
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
    assert ours == carrier["traceparent"]
    tracer.shutdown()


def test_a_leaf_covers_its_block_and_is_never_current(receiver: Receiver) -> None:
    tracer = _tracer(receiver)
    with tracer.message(EVENT):
        with tracer.leaf("admission") as leaf:
            leaf.set("hermes.admitted", True)
            tracer.finished("model.call", 0.01, {})  # traced under the message, not the leaf
        with pytest.raises(KeyError), tracer.leaf("inbox.write"):
            raise KeyError("a secret question")
    tracer.shutdown()
    spans = {name: span for name, (_, span) in _exported(receiver).items()}
    message = spans["message"]
    for name in ("admission", "model.call", "inbox.write"):
        assert spans[name].parent_span_id == message.span_id, name
        assert spans[name].trace_id == message.trace_id
    assert attrs(spans["admission"]) == {"hermes.admitted": True}
    failed = spans["inbox.write"]
    assert failed.status.code == failed.status.STATUS_CODE_ERROR
    assert failed.status.message == "KeyError"  # the class, never the error's text
    assert spans["admission"].status.code == failed.status.STATUS_CODE_UNSET
    assert spans["admission"].end_time_unix_nano >= spans["admission"].start_time_unix_nano


def test_a_failed_span_and_an_annotation_from_a_worker_thread(receiver: Receiver) -> None:
    tracer = _tracer(receiver)
    with pytest.raises(ValueError):
        _fail_in_a_run(tracer)
    tracer.shutdown()
    spans = {name: span for name, (_, span) in _exported(receiver).items()}
    run = spans["run"]
    assert run.parent_span_id == spans["message"].span_id
    assert attrs(run) == {"hermes.busy": "idle", "hermes.model.retries": 2}
    assert (run.status.code, run.status.message) == (run.status.STATUS_CODE_ERROR, "ValueError")
    assert list(run.events) == []  # no exception event: its text could carry the message
    assert spans["message"].status == run.status  # the error went through it too
    assert "a secret question" not in str(list(spans.values()))


def _fail_in_a_run(tracer: OtelTracer) -> None:
    with tracer.message(EVENT), tracer.span("run", {"hermes.busy": "idle"}):
        worker = threading.Thread(target=_annotate, args=(contextvars.copy_context(),))
        worker.start()
        worker.join()
        raise ValueError("a secret question")


def _annotate(context: contextvars.Context) -> None:
    context.run(lambda: active().annotate("hermes.model.retries", 2))


def test_batches_go_out_in_the_tracers_encoding_or_the_sdks(receiver: Receiver) -> None:
    # the SDK this is pinned to has the HTTP client the tracer sends through; without one the
    # exporter falls back to the SDK's own encoding, and the collector sees the same spans
    tracer = _tracer(receiver)
    assert tracer.exporter.send is not None
    with tracer.message(EVENT):
        tracer.finished("model.call", 0.1, {"hermes.model.model": "m"})
    tracer.processor.force_flush()
    tracer.exporter.send = None
    with tracer.message(EVENT):
        tracer.finished("model.call", 0.1, {"hermes.model.model": "m"})
    tracer.shutdown()
    found = receiver.named()
    assert len(found["message"]) == len(found["model.call"]) == 2
    first, second = found["model.call"]
    assert attrs(first) == attrs(second) == {"hermes.model.model": "m"}
    assert tracer.spans.outcomes.labels("exported")._value.get() == 4
