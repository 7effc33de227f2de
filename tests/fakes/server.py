"""The shared base of every fake: an aiohttp app on 127.0.0.1:0 running its own loop in a thread.

A fake in its own thread serves a blocking client (the sync openai SDK), the test's own loop and a
gateway running as a separate process alike. Tests talk to it through thread-safe helpers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")


class FakeServer:
    """Runs `self.app` on 127.0.0.1 (port 0 unless given) in a daemon thread.

    Subclasses add routes in `__init__` and may override `on_shutdown` to release long polls.
    """

    def __init__(self, port: int = 0) -> None:
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.on_shutdown.append(self._on_shutdown)
        self.port = port
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._start_error: BaseException | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:41234``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeServer:
        self._thread = threading.Thread(target=self._run, name=type(self).__name__, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        if self._start_error is not None:
            raise RuntimeError(f"{type(self).__name__} failed to start") from self._start_error
        return self

    def stop(self) -> None:
        if self.loop is None or self._stopped is None or self._thread is None:
            return
        self.loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)
        self.loop = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced through start()
            self._start_error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=1)
        await self._runner.setup()
        # a backlog for a crowd: aiohttp's 128 drops connections when hundreds open at once
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=4096)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stopped.wait()
        await self._runner.cleanup()

    async def _on_shutdown(self, app: web.Application) -> None:
        await self.on_shutdown()

    async def on_shutdown(self) -> None:
        """Release anything that would hold a graceful shutdown (long polls, sockets)."""

    # -- thread-safe helpers for tests ------------------------------------------------------

    def call(self, fn: Callable[[], Coroutine[Any, Any, T]], timeout: float = 10) -> T:
        """Run ``fn()`` on the fake's loop and return its result (from any other thread)."""
        assert self.loop is not None, "fake not started"
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        assert self.loop is not None, "fake not started"
        self.loop.call_soon_threadsafe(fn, *args)


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 10,
    interval: float = 0.01,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` from a sync test until it returns something truthy; fail on timeout
    (with what ``explain`` says, e.g. a gateway's log tail, so a failure on CI can be read)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            why = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"condition not met within {timeout}s: {predicate}{why}")
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], Any], timeout: float = 10, interval: float = 0.01
) -> Any:
    """Like `wait_until`, but yields to the running loop between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        await asyncio.sleep(interval)


async def chunked_response(
    request: web.Request, body: bytes, content_type: str
) -> web.StreamResponse:
    """``body`` sent in 4 KB chunks without a Content-Length: only the bytes tell the size
    (a file whose announced size lies, for the downloaders' caps)."""
    resp = web.StreamResponse(headers={"Content-Type": content_type})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        for start in range(0, len(body), 4096):
            await resp.write(body[start : start + 4096])
        await resp.write_eof()
    except ConnectionError:
        pass  # the client stopped reading at its cap
    return resp
