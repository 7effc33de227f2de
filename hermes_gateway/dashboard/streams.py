"""Server-sent event streams that keep the pages live. A producer runs only while its client is
connected; each stream opens with a `hello` (the page's CSRF token, the gateway's start time),
so a page that reconnects after a restart picks up the new process's token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.errors import RequestError

log = structlog.get_logger("hermes.dashboard")
RETRY_MS = 2000  # EventSource waits this long before reconnecting
KEEPALIVE_S = 15.0
MAX_STREAMS = 32  # open dashboard streams at once; more are refused (503)


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
        produce: Callable[[], AsyncIterator[tuple[str, Any]]],
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
        try:
            await response.prepare(request)
            await response.write(f"retry: {RETRY_MS}\n\n".encode())
            await send(response, "hello", hello)
            async for event, data in produce():
                if self.stopping.is_set():
                    break
                if event == "":
                    await response.write(b": keepalive\n\n")
                else:
                    await send(response, event, data)
        except (ConnectionError, asyncio.CancelledError):
            pass  # the page went away (or the server is stopping): the producer ends with it
        finally:
            self.open -= 1
        return response


async def send(response: web.StreamResponse, event: str, data: Any) -> None:
    payload = json.dumps(data, separators=(",", ":"), default=str)
    await response.write(f"event: {event}\ndata: {payload}\n\n".encode())


def polled(
    read: Callable[[], Awaitable[dict[str, Any]]],
    event: str,
    every: Callable[[], float],
    stopping: asyncio.Event,
) -> Callable[[], AsyncIterator[tuple[str, Any]]]:
    """A producer that reads ``read()`` every ``every()`` seconds and sends it when it changed
    (a keepalive otherwise, now and then)."""

    async def produce() -> AsyncIterator[tuple[str, Any]]:
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
