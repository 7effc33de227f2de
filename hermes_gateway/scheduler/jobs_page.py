"""The dashboard's Jobs page as the scheduler serves it (`JobsSource`, duck-typed: the
dashboard ranks above the scheduler): every job with its last runs, read off the loop in two
bounded queries, and the operator's run now / pause / resume through the `JobService`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from hermes_gateway.errors import RequestError
from hermes_gateway.scheduler.job_service import JobService, JobServiceError, when
from hermes_gateway.scheduler.jobs import Job, RunRecord, job_from_row
from hermes_gateway.scheduler.rows import RECORD, RUNS, record
from hermes_gateway.scheduler.schedule import UNUSABLE, zone_of
from hermes_gateway.store.models import CronJobRow

JOBS_SHOWN = 200  # the oldest jobs first; the page says when there are more
RUNS_SHOWN = 5  # a job's newest runs
OUTPUT_CHARS = 2000  # of a run's answer; the whole is in `hermes cron runs`
_CHUNK = 100  # per-job subqueries in one statement (SQLite allows 500)
ACTIONS = ("run", "pause", "resume")


class JobsPage:
    def __init__(self, job_service: JobService) -> None:
        self.job_service = job_service

    async def snapshot(self) -> list[dict[str, Any]]:
        """Every job (at most `JOBS_SHOWN`) with its newest runs, JSON-ready. Text the model
        or a user wrote (name, prompt, output) is passed as text; the page shows it as text."""
        jobs, runs = await self.job_service.ledger.store.read(self._read)
        return [self._job(job, runs.get(job.id, [])) for job in jobs]

    async def _read(self, db: AsyncSession) -> tuple[list[Job], dict[str, list[RunRecord]]]:
        stmt = select(CronJobRow).order_by(CronJobRow.created_at).limit(JOBS_SHOWN)
        jobs = [job_from_row(r) for r in (await db.scalars(stmt)).all()]
        runs: dict[str, list[RunRecord]] = {}
        ids = [j.id for j in jobs]
        for start in range(0, len(ids), _CHUNK):
            # one indexed LIMIT per job, not a scan of every run a job ever had
            parts = [
                select(
                    select(*RECORD)
                    .where(RUNS.c.job_id == job_id)
                    .order_by(RUNS.c.scheduled_for.desc(), RUNS.c.id.desc())
                    .limit(RUNS_SHOWN)
                    .subquery()
                )
                for job_id in ids[start : start + _CHUNK]
            ]
            stmt_runs = parts[0] if len(parts) == 1 else union_all(*parts)
            for row in await db.execute(stmt_runs):
                r = record(row)
                runs.setdefault(r.job_id, []).append(r)
        for found in runs.values():
            found.sort(key=lambda r: (r.scheduled_for, r.id), reverse=True)
        return jobs, runs

    def _job(self, job: Job, runs: list[RunRecord]) -> dict[str, Any]:
        zone, o = job.schedule.zone, job.origin
        return {
            "id": job.id,
            "name": job.name,
            "chat": f"{o.platform}:{o.chat_id}" if o.chat_id else "none",  # an operator's
            "schedule": job.schedule.text,
            "zone": zone,
            "next_run": when(job.next_run_at, zone) if job.state == "active" else "",
            "next_run_at": job.next_run_at,
            "state": job.state,
            "error": job.problem or "",  # a stored schedule that cannot be used
            "runs_total": job.runs,
            "deliver": job.deliver,
            "prompt": job.prompt,
            "runs": [_run(r, zone) for r in runs],
        }

    async def act(self, job_id: str, action: str) -> dict[str, Any]:
        """run now, pause or resume, as the operator (every job); 404 for no such job, 409
        for what the job service refuses (a run still going)."""
        if action not in ACTIONS:
            raise RequestError(404, f"no action {action!r} (one of {', '.join(ACTIONS)})")
        job = await self.job_service.ledger.get(job_id) if 0 < len(job_id) <= 16 else None
        if job is None:
            raise RequestError(404, f"no job {job_id!r}", "not_found")
        try:
            text = await self.job_service.act(
                {"action": action, "job_id": job.id}, None, "operator"
            )
        except JobServiceError as exc:
            raise RequestError(409, str(exc), "conflict") from None
        return {"job_id": job.id, "action": action, "result": text}


def _run(r: RunRecord, zone: str) -> dict[str, Any]:
    output = r.output or ""
    took = None
    if r.started_at is not None and r.finished_at is not None:
        took = round(r.finished_at - r.started_at, 1)
    return {
        "id": r.id,
        "slot": _at(r.scheduled_for, zone),
        "kind": r.kind,
        "status": r.status,
        "delivery": r.delivery,
        "seconds": took,
        "output": output if len(output) <= OUTPUT_CHARS else output[: OUTPUT_CHARS - 1] + "…",
        "error": r.error or "",
    }


def _at(t: float, zone: str) -> str:
    """A run's slot to the second (runs of a job can be seconds apart)."""
    try:
        return datetime.fromtimestamp(t, zone_of(zone)).strftime(f"%Y-%m-%d %H:%M:%S {zone}")
    except UNUSABLE:  # a job whose stored zone is unknown: its runs still show
        return f"{t} (epoch s)"
