"""A test OTLP/HTTP collector on 127.0.0.1: each export decoded into its spans (with their
resource) and its headers, for the traces tests (in-process and end-to-end)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aiohttp import web

from tests.e2e.daemon import free_port

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")


class Receiver:
    """An OTLP/HTTP collector on 127.0.0.1: each request decoded into its spans and headers."""

    def __init__(self) -> None:
        self.port = free_port()
        self.spans: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.scopes: list[str] = []  # each export's scope spans, by their scope's name
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    async def _export(self, request: web.Request) -> web.Response:
        message = trace_service.ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        with self.lock:
            self.headers.append(dict(request.headers))
            for resource_spans in message.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self.scopes.append(scope_spans.scope.name)
                    self.spans.extend((resource_spans.resource, s) for s in scope_spans.spans)
        body = trace_service.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        runner = web.AppRunner(app)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def start(self) -> None:
        self.thread.start()
        assert self.ready.wait(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def named(self) -> dict[str, list[Any]]:
        with self.lock:
            found: dict[str, list[Any]] = {}
            for _resource, span in self.spans:
                found.setdefault(span.name, []).append(span)
            return found


def attrs(span: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        values[kv.key] = getattr(kv.value, which) if which else None
    return values
