"""The traces seam: the `Tracer` the gateway's parts call, `OFF` when traces are off, and
`build_tracer`, which loads OpenTelemetry (`traces.otel`) only when they are on."""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Callable, Coroutine, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from hermes_gateway.config.schema import TracesConfig
    from hermes_gateway.events import MessageEvent
    from hermes_gateway.metrics import Metrics

Attr = str | int | float | bool
Work = Coroutine[Any, Any, None]
P = ParamSpec("P")
R = TypeVar("R")


class SpanHandle(Protocol):
    def set(self, key: str, value: Attr) -> None: ...


class Tracer(Protocol):
    """What the parts record. Attributes are counts, names and outcomes: never a message's
    text, a tool's arguments or output, nor a secret."""

    def message(self, event: MessageEvent) -> AbstractContextManager[SpanHandle]:
        """The message's root span, current while it is taken in."""
        ...

    def span(self, name: str, attrs: Mapping[str, Attr]) -> AbstractContextManager[SpanHandle]:
        """A child of the current span, current inside the block."""
        ...

    def leaf(self, name: str) -> AbstractContextManager[SpanHandle]:
        """A child of the current span covering the block, recorded as it ends and never
        current: for a step whose own calls trace nothing of their own, at a third of a
        current span's cost (what the block does traces under the current span instead)."""
        ...

    def run(self, event: MessageEvent, attrs: Mapping[str, Attr], work: Work) -> Work:
        """``work`` (a run answering ``event``) under a span whose parent is the message's."""
        ...

    def root(
        self, name: str, attrs: Mapping[str, Attr], links: Sequence[str] = ()
    ) -> AbstractContextManager[SpanHandle]:
        """A new trace's root span, current inside the block, linked to the spans ``links``
        names (W3C traceparents): a job's run, a replay after a restart."""
        ...

    def adopt(self, event: MessageEvent) -> None:
        """The current span becomes the parent of the run answering ``event``."""
        ...

    def traceparent(self) -> str:
        """The current span as a W3C traceparent ("" when there is none)."""
        ...

    def annotate(self, key: str, value: Attr) -> None:
        """Set an attribute on the current span, if one is recording."""
        ...

    def recent(self, session_key: str) -> tuple[str, ...]:
        """The trace ids of the session's latest runs here, newest first (`/status`)."""
        ...

    def waited(self, fn: Callable[P, R]) -> Callable[P, R]:
        """``fn``, recording as it begins (on a worker thread) how long it waited for one."""
        ...

    def finished(self, name: str, seconds: float, attrs: Mapping[str, Attr]) -> None:
        """A child of the current span that took ``seconds`` and has just ended (what the
        agent's thread reports after the fact: a model call, a tool call)."""
        ...

    def shutdown(self) -> None:
        """Export what is queued, within the export timeout (blocking: a thread's job)."""
        ...


class _NoSpan:
    def set(self, key: str, value: Attr) -> None:
        pass


class _Off:
    """Traces off: every call does nothing, and nothing of OpenTelemetry is imported."""

    def message(self, event: MessageEvent) -> AbstractContextManager[SpanHandle]:
        return contextlib.nullcontext(_NO_SPAN)

    def span(self, name: str, attrs: Mapping[str, Attr]) -> AbstractContextManager[SpanHandle]:
        return contextlib.nullcontext(_NO_SPAN)

    def leaf(self, name: str) -> AbstractContextManager[SpanHandle]:
        return contextlib.nullcontext(_NO_SPAN)

    def run(self, event: MessageEvent, attrs: Mapping[str, Attr], work: Work) -> Work:
        return work

    def root(
        self, name: str, attrs: Mapping[str, Attr], links: Sequence[str] = ()
    ) -> AbstractContextManager[SpanHandle]:
        return contextlib.nullcontext(_NO_SPAN)

    def adopt(self, event: MessageEvent) -> None:
        pass

    def traceparent(self) -> str:
        return ""

    def annotate(self, key: str, value: Attr) -> None:
        pass

    def recent(self, session_key: str) -> tuple[str, ...]:
        return ()

    def waited(self, fn: Callable[P, R]) -> Callable[P, R]:
        return fn

    def finished(self, name: str, seconds: float, attrs: Mapping[str, Attr]) -> None:
        pass

    def shutdown(self) -> None:
        pass


_NO_SPAN = _NoSpan()
OFF: Tracer = _Off()
# The tracer whose span is current: it rides the context as the span does, so a part deep in
# a call (the platforms' reply skeleton) makes child spans without a tracer handed through
# every platform's constructor. Outside any span of ours it is `OFF`.
ACTIVE: ContextVar[Tracer] = ContextVar("hermes_tracer", default=OFF)


def active() -> Tracer:
    """The tracer of the current span (`OFF` when there is none, or traces are off)."""
    return ACTIVE.get()


def build_tracer(config: TracesConfig, metrics: Metrics, instance: Callable[[], str]) -> Tracer:
    """`OFF`, or the OpenTelemetry tracer ``config`` describes; its spans name ``instance()``
    (`service.instance.id`), asked only when traces are on."""
    if not config.enabled:
        return OFF
    from hermes_gateway.traces.otel import OtelTracer

    return OtelTracer(config, metrics, instance())


def session_attr(key: str, how: str) -> dict[str, Attr]:
    """The session key as a span may carry it: hashed (a stable, unreadable id) or not at all."""
    if how == "omitted":
        return {}
    return {"hermes.session.hash": hashlib.sha256(key.encode()).hexdigest()[:16]}


def scalar_attrs(prefix: str, data: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Attr]:
    """``data``'s ``keys`` whose values are plain scalars, named under ``prefix`` (a chosen
    few: what the agent reports also holds error texts, which stay out of spans)."""
    return {
        f"{prefix}{k}": v for k in keys if isinstance(v := data.get(k), str | int | float | bool)
    }


def trace_ids(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """A structlog processor: a line logged under a recording span carries its ids. When traces
    are off OpenTelemetry was never imported, and this costs a dictionary lookup."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return event_dict
    context = api.get_current_span().get_span_context()
    if context.is_valid:
        event_dict.setdefault("trace_id", format(context.trace_id, "032x"))
        event_dict.setdefault("span_id", format(context.span_id, "016x"))
    return event_dict
