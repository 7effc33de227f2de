"""The OpenTelemetry tracer: spans sampled by the SDK's sampler and recorded as its
`ReadableSpan`s, exported by its batch processor over the OTLP/HTTP exporter from their own
thread, behind a bound of our own that drops (and counts) spans rather than letting memory grow
while the collector is slow or gone. Imported only when ``observability.traces.enabled``."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from contextvars import Token
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, Sampler, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes
from prometheus_client import Counter

from hermes_gateway import __version__
from hermes_gateway.traces import ACTIVE, Attr, P, R, Tracer, Work, session_attr
from hermes_gateway.traces.otlp import encode

if TYPE_CHECKING:
    from hermes_gateway.config.schema import TracesConfig
    from hermes_gateway.events import MessageEvent
    from hermes_gateway.metrics import Metrics

_ROOTS_KEPT = 4096  # messages whose root span a later run can still find as its parent
_W3C = TraceContextTextMapPropagator()
_RECENT_RUNS = 5  # a session's latest runs whose trace ids `/status` shows
_SCOPE = InstrumentationScope("hermes_gateway", __version__)  # every span's: exported together
_ROOT = otel_context.Context()  # an empty context: a span started in it is a trace's root
_UNSET = Status(StatusCode.UNSET)


class _Spans:
    """The spans on their way out: how many wait, and what became of them (/metrics)."""

    def __init__(self, cap: int, metrics: Metrics) -> None:
        self.cap = cap
        self.waiting = 0
        self.lock = threading.Lock()
        self.outcomes = Counter(
            "hermes_trace_spans",
            "Finished spans by outcome: exported, dropped (the queue was full), failed (export)",
            ["outcome"],
            registry=metrics.registry,
        )

    def take(self) -> bool:
        with self.lock:
            if self.waiting >= self.cap:
                self.outcomes.labels("dropped").inc()
                return False
            self.waiting += 1
            return True

    def done(self, count: int, ok: bool) -> None:
        with self.lock:
            self.waiting = max(0, self.waiting - count)
        self.outcomes.labels("exported" if ok else "failed").inc(count)


class _Bounded(SpanProcessor):
    """Hands finished spans to the batch processor while fewer than ``cap`` wait; its own queue
    has the same size, so it never drops silently: a span over the bound is counted here."""

    def __init__(self, inner: BatchSpanProcessor, spans: _Spans) -> None:
        self.inner = inner
        self.spans = spans

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled and self.spans.take():
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _Exporter(OTLPSpanExporter):
    """The OTLP/HTTP exporter, its HTTP client (headers, compression, retries) sending each
    batch as `otlp.encode` writes it; each batch's outcome counted (on the processor's
    thread)."""

    def __init__(self, config: TracesConfig, spans: _Spans) -> None:
        super().__init__(
            endpoint=config.endpoint,
            headers=dict(config.headers),
            timeout=config.export_timeout_s,
        )
        self.spans = spans
        # The exporter's HTTP client is not public API: with an SDK that no longer has one,
        # a batch is the SDK's own to encode and send, at its cost.
        self.send: Callable[[bytes], object] | None = getattr(
            getattr(self, "_client", None), "export", None
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = False
        try:
            if self.send is None or getattr(self, "_shutdown", False):
                ok = super().export(spans) is SpanExportResult.SUCCESS
            else:
                ok = getattr(self.send(encode(spans)), "success", False) is True
        finally:
            self.spans.done(len(spans), ok)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE


class _Resource(Resource):
    """A resource hashed once. Each batch's spans are grouped by their resource (`otlp.encode`,
    as the SDK's encoder), and the SDK's hash JSON-encodes the attributes every time: it was a
    quarter of an export's CPU."""

    def __init__(self, attributes: Mapping[str, Attr]) -> None:
        super().__init__(dict(attributes))
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return other is self or super().__eq__(other)


class _Ended(ReadableSpan):
    """A span the tracer recorded: no limits were applied to it, so it dropped nothing. (The
    SDK's own counts ask each collection whether it was bounded: an abstract class's
    `isinstance`, three a span, at every export.)"""

    @property
    def dropped_attributes(self) -> int:
        return 0

    @property
    def dropped_events(self) -> int:
        return 0

    @property
    def dropped_links(self) -> int:
        return 0


class _Live(trace.Span):
    """A span being recorded, which becomes the SDK's `ReadableSpan` when it ends. The SDK's
    own live span takes a lock on every call and bounds and copies its attributes: three
    times the CPU, on every message. A span here is written by one task or one thread at a
    time, and its attributes are the tracer's own scalars (`Attr`)."""

    __slots__ = (
        "_attrs",
        "_context",
        "_end",
        "_events",
        "_links",
        "_name",
        "_owner",
        "_parent",
        "_start",
        "_status",
    )

    def __init__(
        self,
        owner: OtelTracer,
        name: str,
        context: trace.SpanContext,
        parent: trace.SpanContext | None,
        attrs: Mapping[str, Attr],
        links: Sequence[trace.Link] = (),
    ) -> None:
        self._owner = owner
        self._name = name
        self._context = context
        self._parent = parent
        self._attrs: dict[str, object] = dict(attrs)
        self._links = tuple(links)
        self._events: tuple[Event, ...] = ()  # seldom any: the tracer adds none of its own
        self._status = _UNSET
        self._start = time.time_ns()
        self._end: int | None = None

    def get_span_context(self) -> trace.SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self._end is None

    def set_attribute(self, key: str, value: object) -> None:
        self._attrs[key] = value

    def set_attributes(self, attributes: Mapping[str, object]) -> None:
        self._attrs.update(attributes)

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        self._events += (Event(name, attributes, timestamp),)

    def update_name(self, name: str) -> None:
        self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        self._status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        # the class only: an exception's text may carry a message's words or a secret
        self.add_event("exception", {"exception.type": type(exception).__name__}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._end is not None:
            return
        self._end = end_time or time.time_ns()
        self._owner.record(
            _Ended(
                self._name,
                self._context,
                self._parent,
                self._owner.resource,
                self._attrs,  # type: ignore[arg-type]
                self._events,
                self._links,
                status=self._status,
                start_time=self._start,
                end_time=self._end,
                instrumentation_scope=_SCOPE,
            )
        )


class _Scope:
    """A span, current from entry to exit, and ended there; a failure is recorded by its class
    only (the SDK's own exception event and status would carry the error's text). One object
    instead of the SDK's three nested context managers: every message pays for its spans on
    the loop."""

    __slots__ = ("_active", "_owner", "_span", "_token")
    _token: Token[otel_context.Context]
    _active: Token[Tracer]

    def __init__(self, owner: OtelTracer, span: trace.Span) -> None:
        self._owner = owner
        self._span = span

    def __enter__(self) -> _Scope:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        self._active = ACTIVE.set(self._owner)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if kind is not None and issubclass(kind, Exception):
            self._span.set_status(Status(StatusCode.ERROR, kind.__name__))
        ACTIVE.reset(self._active)
        otel_context.detach(self._token)
        self._span.end()

    def set(self, key: str, value: Attr) -> None:
        self._span.set_attribute(key, value)

    @property
    def context(self) -> trace.SpanContext:
        return self._span.get_span_context()


class _Leaf:
    """A span recorded when its block ends (`OtelTracer.leaf`), with its failure's class."""

    __slots__ = ("_attrs", "_name", "_owner", "_start")

    def __init__(self, owner: OtelTracer, name: str) -> None:
        self._owner = owner
        self._name = name
        self._attrs: dict[str, Attr] = {}

    def __enter__(self) -> _Leaf:
        self._start = time.time_ns()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        failed = kind is not None and issubclass(kind, Exception)
        status = Status(StatusCode.ERROR, kind.__name__) if failed and kind else _UNSET
        self._owner._between(self._name, self._start, time.time_ns(), self._attrs, status)

    def set(self, key: str, value: Attr) -> None:
        self._attrs[key] = value


class OtelTracer:
    """Implements `Tracer` with a private `TracerProvider` (the global one is left alone)."""

    def __init__(self, config: TracesConfig, metrics: Metrics, instance: str) -> None:
        self.config = config
        self.spans = _Spans(config.queue_max, metrics)
        self.exporter = _Exporter(config, self.spans)
        batch = BatchSpanProcessor(
            self.exporter,
            max_queue_size=config.queue_max,
            schedule_delay_millis=config.schedule_delay_s * 1000,
            max_export_batch_size=min(config.batch_max, config.queue_max),
            export_timeout_millis=config.export_timeout_s * 1000,
        )
        # built from explicit values: `Resource.create` would read OTEL_* itself
        named = {"service.instance.id": instance, **config.resource}
        self.resource = _Resource({**named, "service.name": config.service_name})
        self.processor = _Bounded(batch, self.spans)
        self.sampler = _ratio(config.sample_ratio)  # a trace's root; its spans follow it
        self.ids = RandomIdGenerator()
        self._roots: OrderedDict[tuple[str, str, str], trace.SpanContext] = OrderedDict()
        self._recent: OrderedDict[str, deque[str]] = OrderedDict()  # session key -> trace ids
        self._lock = threading.Lock()

    def message(self, event: MessageEvent) -> _Scope:
        attrs: dict[str, Attr] = {
            "hermes.platform": event.platform,
            "hermes.chat_type": str(event.chat_type),
            "hermes.message.chars": len(event.text),
            "hermes.message.attachments": len(event.attachments),
            **session_attr(event.session_key, self.config.session_key),
        }
        # a root: whatever span is current (an earlier run's) is not this message's parent
        scope = self._scope("message", _ROOT, attrs)
        self._remember(event, scope.context)
        return scope

    def _remember(self, event: MessageEvent, parent: trace.SpanContext) -> None:
        with self._lock:
            self._roots[_key(event)] = parent
            while len(self._roots) > _ROOTS_KEPT:
                self._roots.popitem(last=False)

    def span(self, name: str, attrs: Mapping[str, Attr]) -> _Scope:
        return self._scope(name, None, attrs)

    def leaf(self, name: str) -> _Leaf:
        return _Leaf(self, name)

    def root(self, name: str, attrs: Mapping[str, Attr], links: Sequence[str] = ()) -> _Scope:
        linked = [trace.Link(c) for tp in links if (c := _span_of(tp)) is not None]
        return self._scope(name, _ROOT, attrs, linked)

    def adopt(self, event: MessageEvent) -> None:
        current = trace.get_current_span().get_span_context()
        if current.is_valid:
            self._remember(event, current)

    def traceparent(self) -> str:
        # what the W3C propagator's inject writes, without its carrier and setter
        span = trace.get_current_span().get_span_context()
        if not span.is_valid:
            return ""
        return f"00-{span.trace_id:032x}-{span.span_id:016x}-{span.trace_flags:02x}"

    def _scope(
        self,
        name: str,
        parent: otel_context.Context | None,
        attrs: Mapping[str, Attr],
        links: Sequence[trace.Link] = (),
    ) -> _Scope:
        """A live span made current; an unsampled one records nothing and carries its trace
        on."""
        context, above = self._new(name, parent, attrs, links)
        if not context.trace_flags.sampled:
            return _Scope(self, trace.NonRecordingSpan(context))
        return _Scope(self, _Live(self, name, context, above, attrs, links))

    def _new(
        self,
        name: str,
        parent: otel_context.Context | None,
        attrs: Mapping[str, Attr],
        links: Sequence[trace.Link] = (),
    ) -> tuple[trace.SpanContext, trace.SpanContext | None]:
        """A new span's context under ``parent``'s span (the current one when None), and that
        parent's (None for a root), decided as the SDK's `ParentBased` sampler decides: a
        child is sampled as its parent is, a root by the ratio's sampler."""
        above: trace.SpanContext | None = trace.get_current_span(parent).get_span_context()
        state: trace.TraceState | None
        if above is not None and above.is_valid:
            trace_id, flags, state = above.trace_id, above.trace_flags, above.trace_state
        else:
            above, trace_id = None, self.ids.generate_trace_id()
            decided = self.sampler.should_sample(
                parent, trace_id, name, SpanKind.INTERNAL, attrs, links
            )
            sampled = decided.decision is Decision.RECORD_AND_SAMPLE
            flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else 0)
            state = decided.trace_state
        return trace.SpanContext(trace_id, self.ids.generate_span_id(), False, flags, state), above

    def record(self, span: ReadableSpan) -> None:
        """An ended span, handed to the processors: the bound, then the batch."""
        self.processor.on_end(span)

    async def run(self, event: MessageEvent, attrs: Mapping[str, Attr], work: Work) -> None:
        with self._lock:
            root = self._roots.pop(_key(event), None)
        if root is None and event.trace:  # carried here from another instance: its trace
            root = _span_of(event.trace)
        # no parent known: a root, never the child of whatever span is current
        parent = _ROOT
        if root is not None:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(root))
        with self._scope("run", parent, attrs) as scope:
            self._ran(event.session_key, scope.context)
            await work

    def _ran(self, key: str, run: trace.SpanContext) -> None:
        if not run.trace_flags.sampled:
            return  # a trace no collector has
        with self._lock:
            runs = self._recent.pop(key, None) or deque(maxlen=_RECENT_RUNS)
            runs.appendleft(format(run.trace_id, "032x"))
            self._recent[key] = runs  # the newest session last: the oldest is forgotten first
            while len(self._recent) > _ROOTS_KEPT:
                self._recent.popitem(last=False)

    def recent(self, session_key: str) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._recent.get(session_key, ()))

    def annotate(self, key: str, value: Attr) -> None:
        trace.get_current_span().set_attribute(key, value)

    def waited(self, fn: Callable[P, R]) -> Callable[P, R]:
        submitted = time.time_ns()

        def begin(*args: P.args, **kwargs: P.kwargs) -> R:
            self._between("pool.wait", submitted, time.time_ns(), {})
            return fn(*args, **kwargs)

        return begin

    def finished(self, name: str, seconds: float, attrs: Mapping[str, Attr]) -> None:
        end = time.time_ns()
        self._between(name, end - int(max(0.0, seconds) * 1e9), end, attrs)

    def _between(
        self,
        name: str,
        start: int,
        end: int,
        attrs: Mapping[str, Attr],
        status: Status = _UNSET,
    ) -> None:
        """A span that has ended already, under the current one: recorded as it ended."""
        context, above = self._new(name, None, attrs)
        if context.trace_flags.sampled:
            self.record(
                _Ended(
                    name,
                    context,
                    above,
                    self.resource,
                    dict(attrs),
                    status=status,
                    start_time=start,
                    end_time=end,
                    instrumentation_scope=_SCOPE,
                )
            )

    def shutdown(self) -> None:
        # the SDK's own shutdown exports every queued batch, each up to the export timeout:
        # with the collector gone that could hold the stop for long, so it gets one timeout
        closing = threading.Thread(target=self.processor.shutdown, name="traces-stop", daemon=True)
        closing.start()
        closing.join(self.config.export_timeout_s)


def _ratio(ratio: float) -> Sampler:
    """The root sampler: every trace at 1.0 without the ratio's arithmetic per span."""
    return ALWAYS_ON if ratio >= 1.0 else TraceIdRatioBased(ratio)


def _span_of(traceparent: str) -> trace.SpanContext | None:
    """The remote span a W3C traceparent names, or None for a malformed one."""
    context = trace.get_current_span(_W3C.extract({"traceparent": traceparent}))
    found = context.get_span_context()
    return found if found.is_valid else None


def _key(event: MessageEvent) -> tuple[str, str, str]:
    return (event.platform, event.session_key, event.message_id)
