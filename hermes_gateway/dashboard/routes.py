"""The dashboard's routes: pages (GET, rendered), event streams (GET, SSE) and actions (POST,
JSON in and out, CSRF-checked by `Dashboard._guard`). Actions reuse the control API's own logic:
`/stop` through `Commands`, the quarantine routes' `release`/`discard`, the pairing routes'
`approve_code`/`revoke_user`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from hermes_gateway.control.admin import json_fields
from hermes_gateway.dashboard import chat, logtail, views
from hermes_gateway.dashboard.jobs import ACTIONS
from hermes_gateway.dashboard.streams import pause, polled
from hermes_gateway.errors import RequestError

if TYPE_CHECKING:
    from hermes_gateway.dashboard.app import Dashboard

PAGES = ("sessions", "inbox", "logs", "pairing", "chat")


def add_routes(d: Dashboard) -> None:
    h = _Handlers(d)
    r = d.app.router
    r.add_get("/", h.overview)
    for name in PAGES:
        r.add_get(f"/{name}", h.page)
    r.add_get("/jobs", h.jobs_page)
    r.add_get("/session", h.session)
    r.add_get("/login", h.login_form)
    r.add_post("/login", h.login)
    r.add_post("/logout", h.logout)
    r.add_get("/static/{name}", h.static)
    r.add_get("/events/{topic}", h.events)
    r.add_post("/api/sessions/stop", h.stop)
    r.add_post("/api/inbox/{inbox_id:[0-9]{1,18}}/{action:retry|drop}", h.inbox_action)
    r.add_post("/api/pairing/approve", h.approve)
    r.add_post("/api/pairing/revoke", h.revoke)
    r.add_post("/api/chat", h.chat)
    r.add_post("/api/jobs/{job_id}/{action}", h.job_action)


class _Handlers:
    def __init__(self, d: Dashboard) -> None:
        self.d = d
        self.g = d.parts

    # -- pages ----------------------------------------------------------------------------

    async def overview(self, request: web.Request) -> web.Response:
        return self.d.render(request, "overview")

    async def page(self, request: web.Request) -> web.Response:
        name = request.path.rsplit("/", 1)[-1]
        platforms = list(self.g.adapters)
        return self.d.render(request, name, platforms=platforms)

    async def jobs_page(self, request: web.Request) -> web.Response:
        if self.d.jobs is None:
            raise web.HTTPNotFound()
        return self.d.render(request, "jobs")

    async def session(self, request: web.Request) -> web.Response:
        key = request.query.get("key", "")[:512]
        if not key:
            raise RequestError(400, "'key' is required")
        history, problem = await views.history(self.g, key)
        view = self.g.runner.describe(key)
        state = "idle" if view.state is None else view.state.value
        return self.d.render(
            request,
            "session",
            key=key,
            history=history,
            problem=problem,
            state=state,
            traces=view.traces,
        )

    async def login_form(self, request: web.Request) -> web.Response:
        """The form; with ``once`` (a link `hermes dashboard` printed), the session at once
        and the link spent."""
        once = request.query.get("once")
        if once is None:
            return self._login_page(request, "", 200)
        cookie = self.d.auth.redeem(once[:200])
        if cookie is None:
            return self._login_page(request, "That login link was used or has expired.", 401)
        return self._logged_in(request, cookie)

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        if not self.d.auth.csrf_ok(request, str(form.get("csrf", ""))):
            return self._login_page(request, "The form was stale; try again.", 200)
        cookie = self.d.auth.login(str(form.get("token", "")))
        if cookie is None:
            return self._login_page(request, "Wrong token.", 401)
        return self._logged_in(request, cookie)

    def _login_page(
        self, request: web.Request, error: str, status: int, *, logged_in: bool = False
    ) -> web.Response:
        """The form; over plain HTTP to a non-loopback host it says up front that the browser
        will drop the Secure cookie, and what to do about it."""
        response = self.d.render(
            request,
            "login",
            error=error,
            dropped=self.d.auth.cookie_dropped(request),
            host=request.host,
            logged_in=logged_in,
        )
        response.set_status(status)
        return response

    def _logged_in(self, request: web.Request, cookie: str) -> web.Response:
        """Right token (or link): to the Overview. Where the browser will drop the cookie the
        redirect would only lead back to the form, so the answer explains that instead (with
        a link on, for a TLS proxy this gateway was not told about)."""
        if self.d.auth.cookie_dropped(request):
            response = self._login_page(request, "", 200, logged_in=True)
            self.d.auth.set_cookie(response, cookie)
            return response
        redirect = web.HTTPSeeOther("/dashboard/")  # a link's secret leaves the address bar
        self.d.auth.set_cookie(redirect, cookie)
        raise redirect

    async def logout(self, request: web.Request) -> web.Response:
        response = web.json_response({"ok": True})
        response.del_cookie("hermes_dashboard", path="/dashboard")
        return response

    async def static(self, request: web.Request) -> web.Response:
        found = self.d.static.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound()
        body, kind = found
        return web.Response(body=body, headers={"Content-Type": kind, "Cache-Control": "no-cache"})

    # -- streams --------------------------------------------------------------------------

    async def events(self, request: web.Request) -> web.StreamResponse:
        topic = request.match_info["topic"]
        stopping = self.d.streams.stopping
        every = self._every
        produce: Any
        if topic == "overview":
            produce = self._overview
        elif topic == "sessions":
            produce = polled(self._read(views.sessions), "sessions", every, stopping)
        elif topic == "inbox":
            produce = polled(lambda: views.inbox(self.g), "inbox", every, stopping)
        elif topic == "pairing":
            produce = polled(lambda: views.pairing(self.g), "pairing", every, stopping)
        elif topic == "jobs" and self.d.jobs is not None:
            jobs = self.d.jobs
            produce = polled(self._jobs_rows(jobs), "jobs", every, stopping)
        elif topic == "logs":
            path = self.g.config.home_path / "logs" / "gateway.log"
            produce = logtail.producer(path, logtail.log_filter(dict(request.query)), stopping)
        else:
            raise web.HTTPNotFound()
        return await self.d.streams.serve(request, self.d.hello(request), produce)

    def _every(self) -> float:
        return self.d.config.push_interval_s

    def _read(self, fn: Any) -> Any:
        async def read() -> dict[str, Any]:
            result: dict[str, Any] = fn(self.g)
            return result

        return read

    def _jobs_rows(self, jobs: Any) -> Any:
        async def read() -> dict[str, Any]:
            return {"jobs": await jobs.snapshot()}

        return read

    async def _overview(self) -> AsyncGenerator[tuple[str, Any], None]:
        series, sampler, stopping = self.d.series, self.d.sampler, self.d.streams.stopping
        yield "series", series.window()
        seen = series.version
        while not stopping.is_set():
            yield "status", views.overview(self.g, series)
            await pause(self._every(), sampler.changed, stopping)
            if series.version == seen + 1:
                yield "sample", series.latest()
            elif series.version != seen:
                yield "series", series.window()
            seen = series.version

    # -- actions --------------------------------------------------------------------------

    async def stop(self, request: web.Request) -> web.Response:
        """The Stop button: `/stop` as if the session's user had sent it (they are told)."""
        key = (await json_fields(request, "key"))["key"]
        event = self.g.runner.current_event(key)
        if event is None:
            raise RequestError(404, "nothing is running in that session", "not_running")
        await self.g.commands.handle("stop", "", event, None)
        return web.json_response({"stopped": key})

    async def inbox_action(self, request: web.Request) -> web.Response:
        inbox_id = int(request.match_info["inbox_id"])
        if request.match_info["action"] == "retry":
            await self.g.inbox.release(inbox_id)
            return web.json_response({"retried": inbox_id})
        await self.g.inbox.discard(inbox_id)
        return web.json_response({"dropped": inbox_id})

    async def approve(self, request: web.Request) -> web.Response:
        body = await json_fields(request, "platform", "code")
        approved = await self.g.admin.approve_code(body["platform"], body["code"])
        return web.json_response({"approved": approved.user_id, "platform": approved.platform})

    async def revoke(self, request: web.Request) -> web.Response:
        body = await json_fields(request, "platform", "user_id")
        await self.g.admin.revoke_user(body["platform"], body["user_id"])
        return web.json_response({"revoked": body["user_id"]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        control = self.g.config.control
        token = self.g.control_token.value  # the chat API wants it when one is configured
        return await chat.relay(request, control.host, self.g.port(), token)

    async def job_action(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if self.d.jobs is None or action not in ACTIONS:
            raise web.HTTPNotFound()
        return web.json_response(await self.d.jobs.act(request.match_info["job_id"], action))
