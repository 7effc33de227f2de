"""Server-sent event streams that keep the pages live. A producer runs only while its client is
connected; each stream opens with a `hello` (the page's CSRF token, the gateway's start time),
so a page that reconnects after a restart picks up the new process's token."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.errors import RequestError

log = structlog.get_logger("hermes.dashboard")
RETRY_MS = 2000  # EventSource waits this long before reconnecting
KEEPALIVE_S = 15.0
MAX_STREAMS = 32  # open dashboard streams at once; more are refused (503)
GONE_CHECK_S = 1.0  # how soon a closed page's producer is stopped


async def pause(seconds: float, *events: asyncio.Event) -> None:
    """Sleep ``seconds`` or until one of ``events`` is set."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


class Streams:
    """Opens and counts the streams; ``stopping`` ends them all (the control server's shutdown
    would otherwise wait for them)."""

    def __init__(self) -> None:
        self.open = 0
        self.stopping = asyncio.Event()

    async def serve(
        self,
        request: web.Request,
        hello: dict[str, Any],
        produce: Callable[[], AsyncGenerator[tuple[str, Any], None]],
    ) -> web.StreamResponse:
        if self.open >= MAX_STREAMS:
            raise RequestError(503, "too many dashboard streams open", "busy")
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",  # a proxy must pass events on as they come
            }
        )
        self.open += 1
        pump: asyncio.Task[None] | None = None
        try:
            await response.prepare(request)
            await response.write(f"retry: {RETRY_MS}\n\n".encode())
            await send(response, "hello", hello)
            pump = asyncio.create_task(self._pump(response, produce))
            while not pump.done():
                await asyncio.wait({pump}, timeout=GONE_CHECK_S)
                transport = request.transport
                if transport is None or transport.is_closing():
                    pump.cancel()  # the page is gone: its producer stops now, not at a write
            await asyncio.wait({pump})
            exc = None if pump.cancelled() else pump.exception()
            if exc is not None and not isinstance(exc, ConnectionError):  # gone is no error
                raise exc
        except ConnectionError:
            pass  # the page went away before its stream began
        finally:
            if pump is not None:
                pump.cancel()  # this handler itself cancelled (the server stopping)
            self.open -= 1
        return response

    async def _pump(
        self,
        response: web.StreamResponse,
        produce: Callable[[], AsyncGenerator[tuple[str, Any], None]],
    ) -> None:
        async with contextlib.aclosing(produce()) as events:  # its cleanup runs at once
            async for event, data in events:
                if self.stopping.is_set():
                    return
                if event == "":
                    await response.write(b": keepalive\n\n")
                else:
                    await send(response, event, data)


async def send(response: web.StreamResponse, event: str, data: Any) -> None:
    payload = json.dumps(data, separators=(",", ":"), default=str)
    await response.write(f"event: {event}\ndata: {payload}\n\n".encode())


def polled(
    read: Callable[[], Awaitable[dict[str, Any]]],
    event: str,
    every: Callable[[], float],
    stopping: asyncio.Event,
) -> Callable[[], AsyncGenerator[tuple[str, Any], None]]:
    """A producer that reads ``read()`` every ``every()`` seconds and sends it when it changed
    (a keepalive otherwise, now and then)."""

    async def produce() -> AsyncGenerator[tuple[str, Any], None]:
        last = ""
        quiet = 0.0
        while not stopping.is_set():
            data = await read()
            text = json.dumps(data, sort_keys=True, default=str)
            if text != last:
                last, quiet = text, 0.0
                yield event, data
            elif quiet >= KEEPALIVE_S:
                quiet = 0.0
                yield "", None
            interval = every()
            await pause(interval, stopping)
            quiet += interval

    return produce
