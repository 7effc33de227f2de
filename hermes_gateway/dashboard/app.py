"""`Dashboard`: the web face of the gateway, an aiohttp sub-application on the control server
under `/dashboard/`. It checks its own access (`auth.Auth`), renders Jinja2 templates shipped in
the package, serves its static files, and owns the sampler behind the Overview's charts. Jinja2
and the pages load at the first request (off the loop): an unwatched gateway never holds them."""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from hermes_gateway import __version__
from hermes_gateway.config.schema import DashboardConfig
from hermes_gateway.control.app import ControlServer
from hermes_gateway.dashboard.auth import LINK_S, Auth
from hermes_gateway.dashboard.jobs import JobsSource
from hermes_gateway.dashboard.routes import add_routes
from hermes_gateway.dashboard.sampler import Sampler
from hermes_gateway.dashboard.series import TimeSeries
from hermes_gateway.dashboard.streams import Streams
from hermes_gateway.errors import RequestError

if TYPE_CHECKING:
    import jinja2

    from hermes_gateway.config import Config
    from hermes_gateway.config.live import LiveConfig
    from hermes_gateway.control.admin import AdminRoutes
    from hermes_gateway.control.app import ControlToken
    from hermes_gateway.control.vitals import Vitals
    from hermes_gateway.core.commands import Commands
    from hermes_gateway.core.pool import AgentPool
    from hermes_gateway.core.quarantine import InboxRoutes
    from hermes_gateway.core.runner import GatewayRunner
    from hermes_gateway.metrics import Metrics
    from hermes_gateway.platforms.adapter import Adapter
    from hermes_gateway.platforms.pairing import PairingBook
    from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.dashboard")
PREFIX = "/dashboard"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
OPEN_PATHS = {f"{PREFIX}/login", f"{PREFIX}/static/style.css"}  # the login form needs them
LINK_ROUTE = "/dashboard-link"


@dataclass(frozen=True, slots=True)
class DashboardParts:
    """What the pages read and drive. ``history``: a session's turns (the agent cache's, else
    the store's); ``port``: the control server's, once it listens."""

    live: LiveConfig
    started_at: float
    metrics: Metrics
    store: Store
    runner: GatewayRunner
    pool: AgentPool
    pairing: PairingBook
    inbox: InboxRoutes
    commands: Commands
    admin: AdminRoutes
    adapters: dict[str, Adapter]
    vitals: Vitals
    control_token: ControlToken
    port: Callable[[], int]
    history: Callable[[str], Awaitable[list[dict[str, Any]]]]

    @property
    def config(self) -> Config:
        return self.live.now


class Dashboard:
    """``jobs``: the scheduler's Jobs page (None: none)."""

    def __init__(
        self, parts: DashboardParts, config: DashboardConfig, jobs: JobsSource | None = None
    ) -> None:
        self.parts = parts
        self.config = config
        token = parts.control_token
        self.auth = Auth(
            lambda: token.value,
            loopback_only=token.configured is None,
            secure_cookie=not config.insecure_cookie,
            trust_forwarded_proto=config.trust_forwarded_proto,
        )
        self.series = TimeSeries(config.sample_interval_s)
        self.sampler = Sampler(parts.metrics, self.series, self._gauges)
        self.streams = Streams()
        self.jobs = jobs
        self.env: jinja2.Environment | None = None
        self.static: dict[str, tuple[bytes, str]] = {}
        self._loading = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.app = web.Application(middlewares=[self._guard])
        self.app.on_response_prepare.append(self._headers)
        self.app.on_shutdown.append(self._closing)
        add_routes(self)

    def mount(self, control: ControlServer) -> None:
        # before the sub-app: its prefix resource would answer the bare path with a 404
        control.add_route("GET", PREFIX, _to_overview, access="public")
        control.add_app(PREFIX, self.app)
        # an operator route (the bearer token): `hermes dashboard` asks it for a login link
        control.add_route("POST", LINK_ROUTE, self._new_link)

    async def start(self) -> None:
        """Start sampling: the Overview's charts cover the time since the gateway started."""
        self.sampler.restart()
        self._task = asyncio.create_task(self.sampler.run(), name="dashboard-sampler")

    async def stop(self) -> None:
        self.streams.stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _load(self) -> None:
        """Templates and static files, read once in a thread: importing Jinja2 and reading
        the package's files would stall the loop's timers."""
        async with self._loading:
            if self.env is None:
                self.env, self.static = await asyncio.to_thread(_load_package_files)

    def _gauges(self) -> dict[str, float]:
        g = self.parts
        return {"pool_busy": float(g.pool.busy), "active_sessions": g.runner.counts()["active"]}

    async def _closing(self, app: web.Application) -> None:
        self.streams.stopping.set()  # open streams end, so the server's stop does not wait

    # -- access ---------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.env is None:
            await self._load()
        if not self.auth.reachable(request):
            raise RequestError(403, "the dashboard answers loopback clients only", "loopback_only")
        if request.path not in OPEN_PATHS and not self.auth.allowed(request):
            if request.method == "GET" and _is_page(request.path):
                raise web.HTTPSeeOther(f"{PREFIX}/login")
            raise RequestError(401, "log in to the dashboard first", "unauthorized")
        action = request.method == "POST" and request.path != f"{PREFIX}/login"  # checks its own
        if action and not self.auth.csrf_ok(request, request.headers.get("X-CSRF-Token", "")):
            raise RequestError(403, "missing or stale CSRF token; reload the page", "csrf")
        response: web.StreamResponse = await handler(request)
        return response

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        h = response.headers
        h.setdefault("Content-Security-Policy", CSP)
        h.setdefault("X-Content-Type-Options", "nosniff")
        h.setdefault("X-Frame-Options", "DENY")
        h.setdefault("Referrer-Policy", "same-origin")  # "no-referrer" makes Origin "null"
        h.setdefault("Cache-Control", "no-store")

    # -- rendering ------------------------------------------------------------------------

    def pages(self) -> list[tuple[str, str]]:
        pages = [("overview", "Overview"), ("sessions", "Sessions"), ("inbox", "Inbox")]
        if self.jobs is not None:
            pages.append(("jobs", "Jobs"))
        return [*pages, ("logs", "Logs"), ("pairing", "Pairing"), ("chat", "Chat")]

    def render(self, request: web.Request, name: str, **context: Any) -> web.Response:
        assert self.env is not None
        html = self.env.get_template(f"{name}.html").render(
            page=name,
            pages=self.pages(),
            prefix=PREFIX,
            csrf=self.auth.csrf(request),
            version=__version__,
            **context,
        )
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    def hello(self, request: web.Request) -> dict[str, Any]:
        return {"csrf": self.auth.csrf(request), "started_at": self.parts.started_at}

    async def _new_link(self, request: web.Request) -> web.Response:
        """A one-time login link's path, for `hermes dashboard` (the control token got it
        here, so it stands for the token once)."""
        secret = self.auth.new_link()
        return web.json_response(
            {"path": f"{PREFIX}/login?once={secret}", "expires_in_s": int(LINK_S)}
        )


async def _to_overview(request: web.Request) -> web.Response:
    raise web.HTTPSeeOther(f"{PREFIX}/")


def _is_page(path: str) -> bool:
    return not path.startswith((f"{PREFIX}/api/", f"{PREFIX}/events/", f"{PREFIX}/static/"))


def _load_package_files() -> tuple[jinja2.Environment, dict[str, tuple[bytes, str]]]:
    return _template_env(), _read_static()


def _read_static() -> dict[str, tuple[bytes, str]]:
    static: dict[str, tuple[bytes, str]] = {}
    for f in resources.files("hermes_gateway.dashboard").joinpath("static").iterdir():
        kind = mimetypes.guess_type(f.name)[0] or "text/plain"
        if kind.startswith("text/") or kind.endswith("javascript"):
            kind += "; charset=utf-8"
        static[f.name] = (f.read_bytes(), kind)
    return static


def _template_env() -> jinja2.Environment:
    import jinja2  # here: the dashboard's first request pays for it, in a thread

    root = resources.files("hermes_gateway.dashboard").joinpath("templates")
    templates = {
        f.name: f.read_text(encoding="utf-8") for f in root.iterdir() if f.name.endswith(".html")
    }
    return jinja2.Environment(
        loader=jinja2.DictLoader(templates),
        autoescape=True,  # every template, whatever its name: user text is always escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
