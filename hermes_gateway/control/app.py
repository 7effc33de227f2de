"""The control server (aiohttp): health, readiness, status, metrics, the routes adapters mount
(the local chat API, webhooks), and who may call each: its access class and the control token
(`docs/control-api.md`)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.config import ControlConfig
from hermes_gateway.control.limits import (
    BodyBudget,
    BoundedRunner,
    bad_header,
    error_response,
    fit_fd_limit,
    read_body,
)
from hermes_gateway.control.token import ensure_token_file
from hermes_gateway.errors import RequestError
from hermes_gateway.seam.platform import RouteAccess

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
        self._budget = BodyBudget(config.max_body_bytes_in_flight)
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
            self.app, config=self.config, max_connections=self.max_connections
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, reuse_address=True)
        await site.start()
        if addresses := self._runner.addresses:
            self.port = addresses[0][1]
        log.info("control.listening", host=self.config.host, port=self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if (name := bad_header(request)) is not None:
            return error_response(400, f"header {name} is not valid UTF-8", "bad_header")
        access = self._access_of(request)
        if access == "operator" or (access == "client" and self.token.configured):
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token.value}".encode()):
                return error_response(401, "missing or wrong bearer token", "unauthorized")
        public = access == "public"
        try:
            if not request.body_exists:
                return await handler(request)
            return await self._with_body(request, handler, public)
        except RequestError as exc:
            if exc.status < 500:  # one line: the operator sees why a client was refused
                log.info(
                    "control.rejected",
                    path=request.path,
                    status=exc.status,
                    code=exc.code,
                    reason=str(exc)[:200],
                )
            response = error_response(exc.status, str(exc), exc.code)
            if exc.status in (408, 413, 503):  # the rest of the body is not worth reading
                response.force_close()
            return response
        except web.HTTPException as exc:  # 404, 405, 413: JSON too, so OpenAI clients read it
            if exc.status < 400:
                raise
            response = error_response(exc.status, exc.reason, exc.reason.lower().replace(" ", "_"))
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

    async def _with_body(
        self, request: web.Request, handler: Handler, public: bool
    ) -> web.StreamResponse:
        """Read the body within the size limit, the deadline and the in-flight budget, then
        handle the request; the budget is given back when the handler is done with it."""
        config = self.config
        limit = config.max_webhook_body_bytes if public else config.max_body_bytes
        declared = request.content_length
        if declared is not None and declared > limit:  # refused before a byte is read
            raise RequestError(413, f"the request body is over {limit} bytes", "body_too_large")
        size = min(limit if declared is None else declared, self._budget.total)
        async with AsyncExitStack() as held:
            budgeted = False
            try:
                async with asyncio.timeout(config.body_timeout_s):
                    await held.enter_async_context(self._budget.hold(size))
                    budgeted = True
                    await read_body(request, limit)
            except TimeoutError:
                if not budgeted:
                    raise RequestError(503, "too many request bodies at once", "busy") from None
                raise RequestError(
                    408, "the request body did not arrive in time", "body_timeout"
                ) from None
            return await handler(request)

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
