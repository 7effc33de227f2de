"""The cron tables as the ledger writes them: the tables, a job's row, a run's row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import Table

from hermes_gateway.scheduler.jobs import Job, Plan, RunRecord
from hermes_gateway.store.models import CronJobRow, CronRunRow

JOBS = cast(Table, CronJobRow.__table__)
RUNS = cast(Table, CronRunRow.__table__)
RECORD_COLUMNS = (
    "id job_id scheduled_for kind status delivery claimed_at started_at finished_at "
    "missed parts_sent output error sending sending_after output_files"
)
RECORD = [RUNS.c[n] for n in RECORD_COLUMNS.split()]


def job_row(job: Job, now: float) -> dict[str, Any]:
    s, o = job.schedule, job.origin
    return {
        "id": job.id,
        "name": job.name,
        "prompt": job.prompt,
        "schedule": s.text,
        "kind": s.kind,
        "timezone": s.zone,
        "anchor": s.anchor,
        "every_s": s.every_s,
        "deliver": job.deliver,
        "origin_platform": o.platform,
        "origin_chat_type": o.chat_type,
        "origin_chat_id": o.chat_id,
        "origin_thread_id": o.thread_id,
        "origin_user_id": o.user_id,
        "created_by": job.created_by,
        "state": job.state,
        "next_run_at": job.next_run_at,
        "repeat": job.repeat,
        "runs": 0,
        "catch_up": job.catch_up,
        "grace_s": job.grace_s,
        "timeout_s": job.timeout_s,
        "created_at": now,
        "updated_at": now,
    }


def next_state(plan: Plan) -> str:
    """The job's state once ``plan`` is claimed."""
    if plan.action == "missed":
        return "missed"
    return "active" if plan.next_run_at is not None else "done"


def run_row(owner: str, job_id: str, plan: Plan, now: float, lease_s: float) -> dict[str, Any]:
    live = plan.action == "run"
    return {
        "job_id": job_id,
        "scheduled_for": plan.slot,
        "kind": plan.kind,
        "status": "claimed" if live else plan.kind,
        "owner": owner,
        "lease_until": now + lease_s if live else now,
        "claimed_at": now,
        "finished_at": None if live else now,
        "missed": plan.missed,
        "delivery": "pending" if live else "skipped",
        "parts_sent": 0,
    }


def owner_alive(owner: str, alive: Callable[[int], bool]) -> bool:
    parts = owner.split(":")
    return not (len(parts) >= 2 and parts[1].isdigit()) or alive(int(parts[1]))


def record(r: Any) -> RunRecord:
    return RunRecord(*r)
