"""The operator's routes on the control server, behind `hermes cron`: `GET|POST /v1/cron/jobs`,
`GET|DELETE /v1/cron/jobs/{id}`, `POST /v1/cron/jobs/{id}/pause|resume|run`,
`GET /v1/cron/jobs/{id}/runs[?full=1]`. The operator sees and changes every job."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from hermes_gateway.errors import RequestError
from hermes_gateway.scheduler.job_service import JobService, JobServiceError
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.text.jsonbody import read_object

_FIELDS = ("prompt", "schedule", "name", "timezone", "deliver", "repeat")


class JobRoutes:
    def __init__(self, job_service: JobService, ledger: Ledger) -> None:
        self.job_service = job_service
        self.ledger = ledger

    def mount(self, add_route: Any) -> None:
        add_route("GET", "/v1/cron/jobs", self.list)
        add_route("POST", "/v1/cron/jobs", self.create)
        add_route("GET", "/v1/cron/jobs/{job_id}", self.show)
        add_route("DELETE", "/v1/cron/jobs/{job_id}", self.remove)
        add_route("GET", "/v1/cron/jobs/{job_id}/runs", self.runs)
        for action in ("pause", "resume", "run"):
            add_route("POST", f"/v1/cron/jobs/{{job_id}}/{action}", self.action)

    async def list(self, request: web.Request) -> web.Response:
        jobs = await self.ledger.jobs()
        return web.json_response({"jobs": [j.summary() for j in jobs]})

    async def create(self, request: web.Request) -> web.Response:
        data = await read_object(request)
        fields = {k: data[k] for k in _FIELDS if data.get(k) is not None}
        if "repeat" in fields and not isinstance(fields["repeat"], int):
            raise RequestError(400, "'repeat' must be a whole number")
        try:
            job = await self.job_service.create({"action": "create", **fields}, None, "operator")
        except JobServiceError as exc:
            raise RequestError(400, str(exc), "invalid_job") from None
        return web.json_response({"job": job.summary()})

    async def show(self, request: web.Request) -> web.Response:
        job = await self._job(request)
        return web.json_response({"job": job.summary()})

    async def remove(self, request: web.Request) -> web.Response:
        job = await self._job(request)
        await self.ledger.remove(job.id)
        return web.json_response({"removed": job.id})

    async def runs(self, request: web.Request) -> web.Response:
        job = await self._job(request)
        runs = await self.ledger.runs(job.id, limit=50)
        full = request.query.get("full", "") in ("1", "true")  # outputs whole, not cut
        return web.json_response(
            {"runs": [r.summary(full) for r in runs], "timezone": job.schedule.zone}
        )

    async def action(self, request: web.Request) -> web.Response:
        job = await self._job(request)
        action = request.path.rsplit("/", 1)[1]
        try:
            text = await self.job_service.act(
                {"action": action, "job_id": job.id}, None, "operator"
            )
        except JobServiceError as exc:
            raise RequestError(409, str(exc), "conflict") from None
        return web.json_response({"job_id": job.id, "action": action, "result": text})

    async def _job(self, request: web.Request) -> Any:
        job_id = request.match_info["job_id"]
        job = await self.ledger.get(job_id) if len(job_id) <= 16 else None
        if job is None:
            raise RequestError(404, f"no job {job_id!r}", "not_found")
        return job
