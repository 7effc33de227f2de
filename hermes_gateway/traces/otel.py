"""The OpenTelemetry tracer: the SDK's batch processor exporting over OTLP/HTTP from its own
thread, behind a bound of our own that drops (and counts) spans rather than letting memory grow
while the collector is slow or gone. Imported only when ``observability.traces.enabled``."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter

from hermes_gateway.traces import ACTIVE, Attr, P, R, SpanHandle, Work, session_attr

if TYPE_CHECKING:
    from hermes_gateway.config.schema import TracesConfig
    from hermes_gateway.events import MessageEvent
    from hermes_gateway.metrics import Metrics

_ROOTS_KEPT = 4096  # messages whose root span a later run can still find as its parent
_W3C = TraceContextTextMapPropagator()
_RECENT_RUNS = 5  # a session's latest runs whose trace ids `/status` shows


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


class _Counted(SpanExporter):
    """The OTLP exporter, with each batch's outcome counted (on the processor's thread)."""

    def __init__(self, inner: SpanExporter, spans: _Spans) -> None:
        self.inner = inner
        self.spans = spans

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        finally:
            self.spans.done(len(spans), result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _Handle:
    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def set(self, key: str, value: Attr) -> None:
        self.span.set_attribute(key, value)


class OtelTracer:
    """Implements `Tracer` with a private `TracerProvider` (the global one is left alone)."""

    def __init__(self, config: TracesConfig, metrics: Metrics, instance: str) -> None:
        self.config = config
        self.spans = _Spans(config.queue_max, metrics)
        exporter = OTLPSpanExporter(
            endpoint=config.endpoint,
            headers=dict(config.headers),
            timeout=config.export_timeout_s,
        )
        batch = BatchSpanProcessor(
            _Counted(exporter, self.spans),
            max_queue_size=config.queue_max,
            schedule_delay_millis=config.schedule_delay_s * 1000,
            max_export_batch_size=min(config.batch_max, config.queue_max),
            export_timeout_millis=config.export_timeout_s * 1000,
        )
        # built from explicit values: `Resource.create` would read OTEL_* itself
        named = {"service.instance.id": instance, **config.resource}
        resource = Resource({**named, "service.name": config.service_name})
        self.provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            resource=resource,
            shutdown_on_exit=False,
        )
        self.provider.add_span_processor(_Bounded(batch, self.spans))
        self.tracer = self.provider.get_tracer("hermes_gateway")
        self._roots: OrderedDict[tuple[str, str, str], trace.SpanContext] = OrderedDict()
        self._recent: OrderedDict[str, deque[str]] = OrderedDict()  # session key -> trace ids
        self._lock = threading.Lock()

    @contextmanager
    def message(self, event: MessageEvent) -> Iterator[SpanHandle]:
        attrs: dict[str, Attr] = {
            "hermes.platform": event.platform,
            "hermes.chat_type": str(event.chat_type),
            "hermes.message.chars": len(event.text),
            "hermes.message.attachments": len(event.attachments),
            **session_attr(event.session_key, self.config.session_key),
        }
        # a root: whatever span is current (an earlier run's) is not this message's parent
        with self._current("message", otel_context.Context(), attrs) as span:
            self._remember(event, span.get_span_context())
            yield _Handle(span)

    def _remember(self, event: MessageEvent, parent: trace.SpanContext) -> None:
        with self._lock:
            self._roots[_key(event)] = parent
            while len(self._roots) > _ROOTS_KEPT:
                self._roots.popitem(last=False)

    @contextmanager
    def span(self, name: str, attrs: Mapping[str, Attr]) -> Iterator[SpanHandle]:
        with self._current(name, None, attrs) as span:
            yield _Handle(span)

    @contextmanager
    def root(
        self, name: str, attrs: Mapping[str, Attr], links: Sequence[str] = ()
    ) -> Iterator[SpanHandle]:
        linked = [trace.Link(c) for tp in links if (c := _span_of(tp)) is not None]
        with self._current(name, otel_context.Context(), attrs, linked) as span:
            yield _Handle(span)

    def adopt(self, event: MessageEvent) -> None:
        current = trace.get_current_span().get_span_context()
        if current.is_valid:
            self._remember(event, current)

    def traceparent(self) -> str:
        carrier: dict[str, str] = {}
        _W3C.inject(carrier)
        return carrier.get("traceparent", "")

    @contextmanager
    def _current(
        self,
        name: str,
        parent: otel_context.Context | None,
        attrs: Mapping[str, Attr],
        links: Sequence[trace.Link] = (),
    ) -> Iterator[trace.Span]:
        """A current span that records a failure by its class only: the SDK's own exception
        event and status would carry the error's text."""
        with (
            self.tracer.start_as_current_span(
                name,
                context=parent,
                attributes=dict(attrs),
                links=links,
                record_exception=False,
                set_status_on_exception=False,
            ) as span,
            self._active(),
        ):
            try:
                yield span
            except Exception as exc:
                span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
                raise

    @contextmanager
    def _active(self) -> Iterator[None]:
        token = ACTIVE.set(self)
        try:
            yield
        finally:
            ACTIVE.reset(token)

    async def run(self, event: MessageEvent, attrs: Mapping[str, Attr], work: Work) -> None:
        with self._lock:
            root = self._roots.pop(_key(event), None)
        if root is None and event.trace:  # carried here from another instance: its trace
            root = _span_of(event.trace)
        # no parent known: a root, never the child of whatever span is current
        parent = otel_context.Context()
        if root is not None:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(root))
        with self._current("run", parent, attrs) as span:
            self._ran(event.session_key, span.get_span_context())
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

    def _between(self, name: str, start: int, end: int, attrs: Mapping[str, Attr]) -> None:
        span = self.tracer.start_span(name, attributes=dict(attrs), start_time=start)
        span.end(end_time=end)

    def shutdown(self) -> None:
        # the SDK's own shutdown exports every queued batch, each up to the export timeout:
        # with the collector gone that could hold the stop for long, so it gets one timeout
        closing = threading.Thread(target=self.provider.shutdown, name="traces-stop", daemon=True)
        closing.start()
        closing.join(self.config.export_timeout_s)


def _span_of(traceparent: str) -> trace.SpanContext | None:
    """The remote span a W3C traceparent names, or None for a malformed one."""
    context = trace.get_current_span(_W3C.extract({"traceparent": traceparent}))
    found = context.get_span_context()
    return found if found.is_valid else None


def _key(event: MessageEvent) -> tuple[str, str, str]:
    return (event.platform, event.session_key, event.message_id)
