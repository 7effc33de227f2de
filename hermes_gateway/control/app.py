"""The control server (aiohttp): health, readiness, status, metrics, and the routes adapters
mount (the local chat API, webhooks). A bearer token guards it when `control.token` is set."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.config import ControlConfig
from hermes_gateway.control.aiohttp_shim import forget_body
from hermes_gateway.control.limits import (
    BodyBudget,
    BoundedRunner,
    Lease,
    Pace,
    bad_header,
    error_response,
    fit_fd_limit,
    read_body,
)
from hermes_gateway.control.memory import MemoryGauge
from hermes_gateway.control.rejections import Rejections
from hermes_gateway.errors import RequestError
from hermes_gateway.text.jsonbody import body_done

log = structlog.get_logger("hermes.control")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ControlServer:
    """Owns the aiohttp application and its listening socket."""

    def __init__(
        self,
        config: ControlConfig,
        *,
        health: Callable[[], dict[str, Any]],
        readiness: Callable[[], tuple[bool, list[str]]],
        status: Callable[[], dict[str, Any]],
        metrics: Callable[[], bytes],
    ) -> None:
        self.config = config
        self._health = health
        self._readiness = readiness
        self._status = status
        self._metrics = metrics
        self._public: set[str] = {"/healthz", "/readyz"}
        self._self_guarded: tuple[str, ...] = ()  # path prefixes of sub-apps with their own
        self.max_connections = fit_fd_limit(config.max_connections)
        # webhooks (and the dashboard, which checks its cookie itself) are read before anyone
        # knows who sent them: their bodies have a budget of their own, so strangers' slow
        # uploads never hold the room that authenticated requests need
        self._budget = BodyBudget(config.max_body_bytes_in_flight)
        self._public_budget = BodyBudget(config.max_webhook_body_bytes_in_flight)
        self._pace = Pace(config.min_body_rate_bps, config.body_grace_s)
        self._memory = MemoryGauge(config.max_rss_bytes)
        self.rejections = Rejections(config.rejection_log_interval_s)
        self._summaries: asyncio.Task[None] | None = None
        biggest = max(config.max_body_bytes, config.max_webhook_body_bytes)
        self.app = web.Application(middlewares=[self._guard], client_max_size=biggest)
        self.app.router.add_get("/healthz", self._get_health)
        self.app.router.add_get("/readyz", self._get_ready)
        self.app.router.add_get("/status", self._get_status)
        self.app.router.add_get("/metrics", self._get_metrics)
        self._runner: web.AppRunner | None = None
        self.port = config.port

    def add_route(self, method: str, path: str, handler: Handler, *, public: bool = False) -> None:
        """Mount a handler; ``public`` routes authenticate themselves (webhook secrets)."""
        self.app.router.add_route(method, path, handler)
        if public:
            self._public.add(path)

    def add_app(self, prefix: str, app: web.Application) -> None:
        """Mount a sub-application under ``prefix`` that checks access itself (the dashboard:
        a cookie, not the bearer token)."""
        self.app.add_subapp(prefix, app)
        self._self_guarded += (prefix + "/",)

    async def start(self) -> None:
        self._runner = BoundedRunner(
            self.app,
            config=self.config,
            max_connections=self.max_connections,
            rejections=self.rejections,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        if addresses := self._runner.addresses:
            self.port = addresses[0][1]
        self._summaries = asyncio.create_task(self._summarize(), name="control-rejections")
        log.info("control.listening", host=self.config.host, port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._summaries is not None:
            self._summaries.cancel()
            await asyncio.gather(self._summaries, return_exceptions=True)
            self._summaries = None
            self.rejections.flush()
        await self._memory.close()

    async def _summarize(self) -> None:
        """The rejection counts, written every interval (a flood's tail included)."""
        while True:
            await asyncio.sleep(self.rejections.interval_s)
            self.rejections.flush()

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await self._checked(request, handler)
        except RequestError as exc:
            if exc.status < 500 or exc.code in ("busy", "memory_busy"):
                self._refused(request, exc.status, exc.code, str(exc))
            response = error_response(exc.status, str(exc), exc.code)
            if exc.status in (408, 413, 503):  # the rest of the body is not worth reading
                response.force_close()
            return response
        except web.HTTPException as exc:  # 404, 405, 413: JSON too, so OpenAI clients read it
            if exc.status < 400:
                raise
            code = exc.reason.lower().replace(" ", "_")
            self._refused(request, exc.status, code, exc.reason)
            response = error_response(exc.status, exc.reason, code)
            if allow := exc.headers.get("Allow"):
                response.headers["Allow"] = allow
            return response
        except Exception:
            log.exception("control.handler_failed", path=request.path)
            return error_response(500, "internal error; see the gateway log", "internal_error")

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if (name := bad_header(request)) is not None:
            raise RequestError(400, f"header {name} is not valid UTF-8", "bad_header")
        token = self.config.token
        public = request.path in self._public or request.path.startswith(self._self_guarded)
        if token and not public:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                raise RequestError(401, "missing or wrong bearer token", "unauthorized")
        if not request.body_exists:
            return await handler(request)
        return await self._with_body(request, handler, public)

    def _refused(self, request: web.Request, status: int, code: str, reason: str) -> None:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        self.rejections.note(code, status, request.remote or "-", route, reason)

    async def _with_body(
        self, request: web.Request, handler: Handler, public: bool
    ) -> web.StreamResponse:
        """Read the body within the size limit, the pace, the deadline, its budget and the
        memory ceiling, then handle the request; the budget is given back when the body is
        parsed (`jsonbody.read_json`) or, at the latest, when the handler returns."""
        config = self.config
        limit = config.max_webhook_body_bytes if public else config.max_body_bytes
        declared = request.content_length
        if declared is not None and declared > limit:  # refused before a byte is read
            raise RequestError(413, f"the request body is over {limit} bytes", "body_too_large")
        budget = self._public_budget if public else self._budget
        size = min(limit if declared is None else declared, budget.total)
        lease: Lease | None = None
        began = asyncio.get_running_loop().time()  # the pace counts the wait for room too
        try:
            try:
                async with asyncio.timeout(config.body_timeout_s):
                    lease = await budget.take(size, lambda: self._admit(budget))
                    await read_body(request, limit, self._pace, began)
            except TimeoutError:
                if lease is None:
                    raise RequestError(503, "too many request bodies at once", "busy") from None
                raise RequestError(
                    408, "the request body did not arrive in time", "body_timeout"
                ) from None
            reset = body_done.set(lambda: self._done_with(request, lease))
            try:
                return await handler(request)
            finally:
                body_done.reset(reset)
        finally:
            if lease is not None:
                lease.release()
                # what the request carried into its handler (a chat run's history) is gone
                self._memory.freed(lease.size)

    @staticmethod
    def _done_with(request: web.Request, lease: Lease) -> None:
        """The body is parsed: its bytes and its share of the budget are let go."""
        forget_body(request)
        lease.release()

    def _admit(self, budget: BodyBudget) -> None:
        """Refuse a new body while the process is over its memory ceiling, unless no other
        body is in flight (so a gateway that stays high still answers one at a time)."""
        if self._memory.over() and not (budget.idle and self._other(budget).idle):
            raise RequestError(503, "the gateway is short of memory; retry", "memory_busy")

    def _other(self, budget: BodyBudget) -> BodyBudget:
        return self._budget if budget is self._public_budget else self._public_budget

    async def _get_health(self, request: web.Request) -> web.Response:
        return web.json_response(self._health())

    async def _get_ready(self, request: web.Request) -> web.Response:
        ready, reasons = self._readiness()
        return web.json_response({"ready": ready, "reasons": reasons}, status=200 if ready else 503)

    async def _get_status(self, request: web.Request) -> web.Response:
        return web.json_response(self._status())

    async def _get_metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self._metrics(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )
