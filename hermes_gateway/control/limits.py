"""Connection and body bounds for the control server: a request-head deadline, an idle deadline,
a cap on open connections, and request bodies read under a size limit, a floor on their pace,
a deadline and a budget of bytes held at once. aiohttp has the idle timer; the rest is here."""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import structlog
from aiohttp import web
from aiohttp.web_request import BaseRequest

from hermes_gateway.config import ControlConfig
from hermes_gateway.control.aiohttp_shim import (
    HandlerBase,
    RunnerBase,
    ServerBase,
    remember_body,
    server_kwargs,
)
from hermes_gateway.control.rejections import Rejections
from hermes_gateway.errors import RequestError

log = structlog.get_logger("hermes.control")
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_FD_RESERVE = 64  # descriptors kept for the store, logs, tools and outbound calls


def error_response(status: int, message: str, code: str = "invalid_request_error") -> web.Response:
    """An OpenAI-style error body, so OpenAI clients show the message."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=status)


def fit_fd_limit(wanted: int) -> int:
    """The connection cap, lowered to half the open-file limit so a flood of connections can
    never take the descriptors the store, logs and platform calls need."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    fits = max(16, min(soft // 2, soft - _FD_RESERVE))
    if wanted > fits:
        log.info("control.max_connections_lowered", wanted=wanted, used=fits, nofile=soft)
        return fits
    return wanted


class _Handler(HandlerBase):
    """aiohttp's connection handler, plus a deadline from a request's first byte to the end of
    its head (aiohttp's keep-alive timer bounds a connection that sends nothing), and a cap on
    open connections (over it: 503 and close at once, the descriptor freed)."""

    __slots__ = ("_cap", "_head_handle", "_head_timeout", "_rejections")

    def __init__(
        self,
        manager: web.Server,
        *,
        head_timeout: float,
        cap: int,
        rejections: Rejections,
        **kw: Any,
    ) -> None:
        super().__init__(manager, **kw)
        self._head_timeout = head_timeout
        self._head_handle: asyncio.TimerHandle | None = None
        self._cap = cap
        self._rejections = rejections

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.open_connections() >= self._cap:
            transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
            transport.write(_BUSY)
            transport.close()
            peer = transport.get_extra_info("peername")
            source = str(peer[0]) if isinstance(peer, tuple) and peer else "-"
            self._rejections.note("connections_full", 503, source, "-", "too many connections")
            return
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.head_pending():
            if self._head_handle is None:
                self._head_handle = self.event_loop().call_later(
                    self._head_timeout, self._head_expired
                )
        elif self._head_handle is not None:
            self._head_handle.cancel()
            self._head_handle = None

    def _head_expired(self) -> None:
        self._head_handle = None
        if self.head_pending() and not self.closing():
            log.debug("control.head_timeout")
            self.force_close()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A request aiohttp could not parse: a one-line INFO record and a JSON 4xx, not an
        ERROR with a traceback quoting the stranger's bytes."""
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        text = str(getattr(exc, "message", None) or message or type(exc).__name__)
        reason = text.partition("\n")[0][:80]  # aiohttp quotes the offending bytes below
        self._rejections.note("bad_request", status, request.remote or "-", "-", reason)
        if request.writer.output_size > 0:
            raise ConnectionError("the answer has begun; cannot send an error")
        response = error_response(status, f"malformed request: {reason}", "bad_request")
        response.force_close()
        return response

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_handle is not None:
            self._head_handle.cancel()
            self._head_handle = None
        super().connection_lost(exc)


class _Server(ServerBase):
    def __init__(
        self,
        base: web.Server,
        config: ControlConfig,
        max_connections: int,
        rejections: Rejections,
        **kw: Any,
    ) -> None:
        super().__init__(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            **kw,
        )
        self._head_timeout = config.header_timeout_s
        self._cap = max_connections
        self._rejections = rejections

    def __call__(self) -> _Handler:
        kw = self.handler_kwargs()
        return _Handler(
            self,
            head_timeout=self._head_timeout,
            cap=self._cap,
            rejections=self._rejections,
            **kw,
        )


class BoundedRunner(RunnerBase):
    """An `AppRunner` whose connections are `_Handler`s."""

    def __init__(
        self,
        app: web.Application,
        config: ControlConfig,
        max_connections: int,
        rejections: Rejections,
    ) -> None:
        super().__init__(
            app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=config.idle_timeout_s,
            lingering_time=1.0,  # a refused body is drained at most this long, then closed
            shutdown_timeout=5.0,  # a stuck handler must not hold a stop past systemd's limit
        )
        self._config = config
        self._max_connections = max_connections
        self._rejections = rejections

    def wrap_server(self, base: web.Server) -> web.Server:
        loop = asyncio.get_running_loop()
        kw = server_kwargs(base)
        return _Server(base, self._config, self._max_connections, self._rejections, loop=loop, **kw)


class BodyBudget:
    """Request body bytes held in memory at once, across the requests that share it. A wait
    for room wakes at least every ``recheck_s`` to ask ``admit`` again (it raises to refuse:
    memory over its ceiling), so a waiting request never outlives the reason to refuse it."""

    def __init__(self, total: int, recheck_s: float = 0.25) -> None:
        self.total = total
        self.held = 0
        self._recheck_s = recheck_s
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def idle(self) -> bool:
        """Nothing held and nobody waiting."""
        return self.held == 0 and not self._waiters

    async def take(self, size: int, admit: Callable[[], None]) -> Lease:
        """Room for ``size`` bytes, as a lease the caller must release."""
        while self.held + size > self.total:
            admit()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._recheck_s):
                        await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        admit()
        self.held += size
        return Lease(self, size)

    def give_back(self, size: int) -> None:
        self.held -= size
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class Lease:
    """A share of a `BodyBudget`; `release` is idempotent (the parser gives it back early, the
    control server at the handler's end in any case)."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: BodyBudget, size: int) -> None:
        self._budget: BodyBudget | None = budget
        self.size = size

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.give_back(self.size)


@dataclass(frozen=True, slots=True)
class Pace:
    """The slowest a body may arrive: ``min_rate`` bytes a second on average once ``grace_s``
    has passed since its head (0: no floor)."""

    min_rate: float
    grace_s: float

    def due(self, began: float, received: int) -> float | None:
        """The loop time by which more bytes must have come, or None when there is no floor."""
        if self.min_rate <= 0:
            return None
        return began + self.grace_s + received / self.min_rate


async def read_body(
    request: web.Request, limit: int, pace: Pace | None = None, began: float | None = None
) -> bytes:
    """The whole body, refused with 413 past ``limit`` (by its Content-Length before a byte is
    read) and with 408 when it arrives slower than ``pace`` counted from ``began`` (loop time;
    default now: what came while the request waited for its budget counts); the caller bounds
    the total time. aiohttp keeps it, so handlers' `read()` reuses it."""
    declared = request.content_length
    if declared is not None and declared > limit:
        raise RequestError(413, f"the request body is over {limit} bytes", "body_too_large")
    if began is None:
        began = asyncio.get_running_loop().time()
    chunks: list[bytes] = []
    received = 0
    while True:
        due = pace.due(began, received) if pace is not None else None
        try:
            async with asyncio.timeout_at(due):
                chunk = await request.content.read(65536)
        except TimeoutError:
            assert pace is not None  # only a pace sets a deadline here
            raise RequestError(
                408, f"the request body came slower than {pace.min_rate:.0f} bytes/s", "too_slow"
            ) from None
        if not chunk:
            break
        chunks.append(chunk)
        received += len(chunk)
        if received > limit:
            raise RequestError(413, f"the request body is over {limit} bytes", "body_too_large")
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    del chunks  # one copy of the body from here on, not two
    remember_body(request, data)  # what `BaseRequest.read()` returns from now on
    return data


def bad_header(request: web.Request) -> str | None:
    """The name of a header whose value is not UTF-8 (aiohttp keeps such bytes as surrogates,
    which fail wherever the value is encoded again), or None."""
    for name, value in request.headers.items():
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                return name
    return None
