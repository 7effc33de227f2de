"""The tracer's own OTLP encoding against the exporter's: for any batch of spans the SDK can
hold (links, events, trace state, remote parents, statuses, every attribute type), the same
bytes as the SDK's `encode_spans`, which the official proto package then parses."""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from hermes_gateway.traces.otlp import encode

_text = st.text(max_size=12)
_int64 = st.integers(-(1 << 63), (1 << 63) - 1)
_scalar = st.one_of(
    st.none(), st.booleans(), _text, _int64, st.floats(allow_nan=False), st.binary(max_size=8)
)
_value = st.one_of(_scalar, st.lists(_scalar, max_size=3), st.tuples(_text, _int64))
_attributes = st.dictionaries(st.text(max_size=20), _value, max_size=6)
_ids = st.integers(1, (1 << 64) - 1)
_state = st.lists(
    st.tuples(st.from_regex(r"\A[a-z][a-z0-9]{0,5}\Z"), st.from_regex(r"\A[a-z0-9]{1,6}\Z")),
    max_size=2,
    unique_by=lambda pair: pair[0],
).map(TraceState)


@st.composite
def _context(draw: st.DrawFn) -> SpanContext:
    return SpanContext(
        draw(st.integers(1, (1 << 128) - 1)),
        draw(_ids),
        is_remote=draw(st.booleans()),
        trace_flags=TraceFlags(draw(st.sampled_from([0, 1]))),
        trace_state=draw(_state),
    )


_RESOURCES = [Resource({"service.name": "a", "n": 1}), Resource({}, "https://schema/1")]
_SCOPES = [
    InstrumentationScope("hermes_gateway", "1.0"),
    InstrumentationScope("other", None, "https://schema/2", {"k": "v"}),
    None,
]


@st.composite
def _span(draw: st.DrawFn) -> ReadableSpan:
    start = draw(st.one_of(st.none(), st.integers(0, 1 << 62)))
    events = draw(
        st.lists(st.builds(Event, _text, _attributes, st.integers(0, 1 << 62)), max_size=2)
    )
    return ReadableSpan(
        draw(_text),
        draw(_context()),
        draw(st.one_of(st.none(), _context())),
        draw(st.sampled_from(_RESOURCES)),
        draw(_attributes),
        events,
        draw(st.lists(st.builds(Link, _context(), _attributes), max_size=2)),
        draw(st.sampled_from(list(SpanKind))),
        instrumentation_scope=draw(st.sampled_from(_SCOPES)),
        status=Status(draw(st.sampled_from(list(StatusCode))), draw(st.one_of(st.none(), _text))),
        start_time=start,
        end_time=draw(st.one_of(st.none(), st.integers(0, 1 << 62))),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_span(), max_size=6))
def test_the_bytes_are_the_sdk_encoders(spans: list[ReadableSpan]) -> None:
    ours = encode(spans)
    assert ours == encode_spans(spans).SerializePartialToString()
    parsed = ExportTraceServiceRequest()
    parsed.ParseFromString(ours)
    names = [s.name for r in parsed.resource_spans for g in r.scope_spans for s in g.spans]
    assert sorted(names) == sorted(span.name for span in spans)


def _one(attributes: dict[str, Any]) -> ReadableSpan:
    context = SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(1))
    return ReadableSpan("s", context, resource=_RESOURCES[0], attributes=attributes)


def test_an_attribute_it_cannot_encode_is_left_out_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans = [_one({"ok": 1, "huge": 1 << 64, "odd": object(), "after": "x"})]
    with caplog.at_level(logging.WARNING, logger="hermes_gateway.traces.otlp"):
        parsed = ExportTraceServiceRequest()
        parsed.ParseFromString(encode(spans))
    span = parsed.resource_spans[0].scope_spans[0].spans[0]
    assert [kv.key for kv in span.attributes] == ["ok", "after"]
    logged = caplog.text
    assert "huge" in logged and "odd" in logged and "object at" not in logged
