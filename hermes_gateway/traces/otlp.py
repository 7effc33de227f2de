"""Finished spans written as an OTLP `ExportTraceServiceRequest` in protobuf's wire format:
the bytes the exporter's own encoder produces, at about a third of its CPU, since every
message's spans are encoded in the gateway's process. Imported only when traces are on."""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from opentelemetry.trace import StatusCode

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status
    from opentelemetry.util.types import AttributeValue

# The field numbers and wire types of opentelemetry-proto's trace.proto and common.proto, as a
# field's tag byte(s): (number << 3) | type, type 0 a varint, 1 eight bytes, 2 a length-prefixed
# body, 5 four bytes. The encoder's tests parse the output with the official proto package.
_DOUBLE = struct.Struct("<d").pack
_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_SMALL = [bytes((n,)) for n in range(128)]
_INT64 = (1 << 64) - 1  # a negative int64 is its two's complement, ten bytes as a varint
_HAS_IS_REMOTE = 0x100  # SpanFlags: the parent's is_remote is known ...
_IS_REMOTE = 0x200  # ... and it was remote
_KEYS_KEPT = 1024  # encoded attribute keys remembered: the gateway uses a few dozen
_INT64_RANGE = range(-(1 << 63), 1 << 63)
_log = logging.getLogger(__name__)


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: its tag, the body's length, the body."""
    size = len(body)
    return tag + (_SMALL[size] if size < 0x80 else _varint(size)) + body


def _text(tag: bytes, text: str) -> bytes:
    """A string field, absent when empty: proto3 writes no field holding its default."""
    return _field(tag, text.encode()) if text else b""


def _fixed64(tag: bytes, number: int | None) -> bytes:
    return tag + _FIXED64(number) if number else b""


def _value(value: AttributeValue | Mapping[str, object] | None) -> bytes:
    """An `AnyValue`'s body, as the SDK's `_encode_value` chooses its field."""
    kind = type(value)  # the common scalars first, without the chain of checks below
    if kind is str:
        return _field(b"\x0a", value.encode())  # type: ignore[union-attr]
    if kind is int and value in _INT64_RANGE:
        return b"\x18" + _varint(value & _INT64)  # type: ignore[operator]
    if value is None:
        return b""
    if isinstance(value, bool):  # before int: a bool is an int
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, int):
        if value not in _INT64_RANGE:
            raise ValueError("an int past the range of an int64")  # never the value
        return b"\x18" + _varint(value & _INT64)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    if isinstance(value, Sequence):
        items = b"".join(_field(b"\x0a", _value(item)) for item in value)
        return _field(b"\x2a", items)
    if isinstance(value, Mapping):
        pairs = b"".join(_field(b"\x0a", _pair(str(k), v)) for k, v in value.items())
        return _field(b"\x32", pairs)
    raise TypeError(f"an attribute cannot be a {type(value).__name__}")  # never the value


_keys: dict[str, bytes] = {}


def _pair(key: str, value: object) -> bytes:
    """A `KeyValue`'s body; keys repeat on every span, so their encoding is kept."""
    encoded = _keys.get(key)
    if encoded is None:
        encoded = _text(b"\x0a", key)
        if len(_keys) < _KEYS_KEPT:
            _keys[key] = encoded
    return encoded + _field(b"\x12", _value(value))  # type: ignore[arg-type]


def _attributes(tag: bytes, attributes: Mapping[str, object] | None) -> bytes:
    """Each attribute a `KeyValue`; one that cannot be encoded is left out and logged, as
    the SDK's encoder does, rather than failing the whole batch."""
    if not attributes:
        return b""
    fields = []
    for key, value in attributes.items():
        try:
            fields.append(_field(tag, _pair(key, value)))
        except (TypeError, ValueError) as error:
            _log.warning("span attribute %s left out: %s", key, error)
    return b"".join(fields)


def _flags(parent: SpanContext | None) -> bytes:
    remote = parent is not None and parent.is_remote
    return _FIXED32(_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0))


_LOCAL_FLAGS = b"\x85\x01" + _flags(None)  # a span with a local parent, or none
_NO_STATUS = b"\x7a\x00"  # UNSET, without a description: an empty `Status`
_kinds: dict[SpanKind, bytes] = {}  # the API's kinds start at 0, OTLP's at 1
_names: dict[str, bytes] = {}  # a span's name, tag and all: the tracer has a dozen


def _span(span: ReadableSpan) -> bytes:
    """A `Span`'s body, its fields in the order of their numbers (as protobuf writes them)."""
    context = span.context
    assert context is not None  # every span the SDK or the tracer records has one
    parts = [b"\x0a\x10" + context.trace_id.to_bytes(16, "big")]
    parts.append(b"\x12\x08" + context.span_id.to_bytes(8, "big"))
    if context.trace_state:
        state = ",".join(f"{key}={value}" for key, value in context.trace_state.items())
        parts.append(_field(b"\x1a", state.encode()))
    parent = span.parent
    if parent:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    name = _names.get(span.name)
    if name is None:
        name = _text(b"\x2a", span.name)
        if len(_names) < _KEYS_KEPT:
            _names[span.name] = name
    parts.append(name)
    kind = _kinds.get(span.kind)
    if kind is None:
        kind = _kinds[span.kind] = b"\x30" + _SMALL[span.kind.value + 1]
    parts.append(kind)
    parts.append(_fixed64(b"\x39", span.start_time) + _fixed64(b"\x41", span.end_time))
    parts.append(_attributes(b"\x4a", span.attributes))
    parts.append(_rare(span))
    status = span.status
    if status is not None:
        plain = status.status_code is StatusCode.UNSET and not status.description
        parts.append(_NO_STATUS if plain else _field(b"\x7a", _status(status)))
    remote = parent is not None and parent.is_remote
    parts.append(b"\x85\x01" + _flags(parent) if remote else _LOCAL_FLAGS)
    return b"".join(parts)


def _rare(span: ReadableSpan) -> bytes:
    """Fields 10 to 14, which the gateway's own spans seldom have: dropped attributes, events,
    links and their counts."""
    parts = []
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        body = _fixed64(b"\x09", event.timestamp) + _text(b"\x12", event.name)
        body += _attributes(b"\x1a", event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        parts.append(_field(b"\x5a", body))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:
        linked = link.context
        body = b"\x0a\x10" + linked.trace_id.to_bytes(16, "big")
        body += b"\x12\x08" + linked.span_id.to_bytes(8, "big")
        body += _attributes(b"\x22", link.attributes)
        if link.dropped_attributes:
            body += b"\x28" + _varint(link.dropped_attributes)
        parts.append(_field(b"\x6a", body + b"\x35" + _flags(linked)))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    return b"".join(parts)


def _status(status: Status) -> bytes:
    body = _text(b"\x12", status.description or "")
    code = status.status_code.value
    return body + (b"\x18" + _SMALL[code] if code else b"")


def _scope(scope: InstrumentationScope | None) -> bytes:
    if scope is None:
        return b""
    body = _text(b"\x0a", scope.name) + _text(b"\x12", scope.version or "")
    return body + _attributes(b"\x1a", scope.attributes)


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """The request for a batch: its spans grouped by resource, then by instrumentation scope,
    each group in the order it first appears (as the SDK's encoder groups them)."""
    groups: dict[Resource, dict[InstrumentationScope | None, list[bytes]]] = {}
    for span in spans:
        scopes = groups.setdefault(span.resource, {})
        scopes.setdefault(span.instrumentation_scope, []).append(_field(b"\x12", _span(span)))
    request = []
    for resource, scopes in groups.items():
        body = [_field(b"\x0a", _attributes(b"\x0a", resource.attributes))]
        for scope, encoded in scopes.items():
            spans_of_scope = _field(b"\x0a", _scope(scope)) + b"".join(encoded)
            if scope is not None:
                spans_of_scope += _text(b"\x1a", scope.schema_url or "")
            body.append(_field(b"\x12", spans_of_scope))
        body.append(_text(b"\x1a", resource.schema_url))
        request.append(_field(b"\x0a", b"".join(body)))
    return b"".join(request)
