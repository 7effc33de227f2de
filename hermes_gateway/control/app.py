"""The control server (aiohttp): health, readiness, status, metrics, the routes adapters mount
(the local chat API, webhooks), and who may call each: its access class and the control token
(`docs/control-api.md`)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path
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
from hermes_gateway.control.rejections import Rejections
from hermes_gateway.control.rss import MemoryGauge
from hermes_gateway.control.token import ensure_token_file
from hermes_gateway.errors import RequestError
from hermes_gateway.platforms.adapter import RouteAccess
from hermes_gateway.text.jsonbody import body_done

log = structlog.get_logger("hermes.control")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ControlToken:
    """The token operator routes want: `control.token`, else the generated file's (see
    control/token.py), known once `load` ran: in a thread, at start, before the port listens."""

    def __init__(self, configured: str | None, home: Path) -> None:
        self.configured = configured or None
        self._home = home
        self._value = self.configured

    async def load(self) -> None:
        if self._value is not None:
            return
        found = await asyncio.to_thread(ensure_token_file, self._home)
        if found.created:
            log.info("control.token_created", path=str(found.path))
        if found.was_mode is not None:
            log.warning("control.token_mode_fixed", path=str(found.path), was=oct(found.was_mode))
        self._value = found.token

    @property
    def value(self) -> str:
        if self._value is None:
            raise RuntimeError("the control token is read at start, before the port listens")
        return self._value


class ControlServer:
    """Owns the aiohttp application and its listening socket."""

    def __init__(
        self,
        config: ControlConfig,
        token: ControlToken,
        *,
        health: Callable[[], dict[str, Any]],
        readiness: Callable[[], tuple[bool, list[str]]],
        status: Callable[[], dict[str, Any]],
        metrics: Callable[[], bytes],
    ) -> None:
        self.config = config
        self.token = token
        self._health = health
        self._readiness = readiness
        self._status = status
        self._metrics = metrics
        # by route path; a path with no route (404, 405) is a client's: it reveals nothing
        self._access: dict[str, RouteAccess] = {}
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
        self.add_route("GET", "/healthz", self._get_health, access="public")
        self.add_route("GET", "/readyz", self._get_ready, access="public")
        self.add_route("GET", "/status", self._get_status)
        self.add_route("GET", "/metrics", self._get_metrics, access="client")
        self._runner: web.AppRunner | None = None
        self.port = config.port

    def add_route(
        self, method: str, path: str, handler: Handler, *, access: RouteAccess = "operator"
    ) -> None:
        """Mount a handler (see `RouteAccess`): an operator route unless said otherwise."""
        resource = self.app.router.add_route(method, path, handler).resource
        assert resource is not None
        known = self._access.setdefault(resource.canonical, access)
        if known != access:  # one path, one rule: a method's route must not open another's
            raise ValueError(f"{path} is already mounted as {known}, not {access}")

    def add_app(self, prefix: str, app: web.Application) -> None:
        """Mount a sub-application under ``prefix`` that checks access itself (the dashboard:
        a session cookie got with the control token, not the bearer token on each request)."""
        self.app.add_subapp(prefix, app)

    async def start(self) -> None:
        await self.token.load()  # before the port opens: no request finds it unknown
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

    def _access_of(self, request: web.Request) -> RouteAccess:
        info = request.match_info
        if info.apps and info.apps[-1] is not self.app:
            return "public"  # a sub-application's route: it checks access itself
        resource = info.route.resource
        if resource is None:
            return "client"
        return self._access.get(resource.canonical, "operator")

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if (name := bad_header(request)) is not None:
            raise RequestError(400, f"header {name} is not valid UTF-8", "bad_header")
        access = self._access_of(request)
        if access == "operator" or (access == "client" and self.token.configured):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token.value}".encode()):
                raise RequestError(401, "missing or wrong bearer token", "unauthorized")
        if not request.body_exists:
            return await handler(request)
        # webhooks and the dashboard are read before anyone knows who sent them
        return await self._with_body(request, handler, access == "public")

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
