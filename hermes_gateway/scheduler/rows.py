"""The cron tables as the ledger writes them: the tables, a job's row, a run's row, and the
statements a batch of claims is made of."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import BigInteger, Integer, String, Table, and_, case, false, literal, or_, update
from sqlalchemy.ext.asyncio import AsyncSession

from hermes_gateway.scheduler.jobs import Job, Plan, RunRecord
from hermes_gateway.store.models import CronJobRow, CronRunRow

JOBS = cast(Table, CronJobRow.__table__)
RUNS = cast(Table, CronRunRow.__table__)
RECORD_COLUMNS = (
    "id job_id scheduled_for kind status delivery claimed_at started_at finished_at "
    "missed parts_sent output error"
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


def advance_all(items: list[tuple[Job, Plan]], now: float) -> Any:
    """One UPDATE moving each job past its planned slot if it is still where it was read."""
    by_id = JOBS.c.id
    # typed literals: PostgreSQL would read an untyped CASE branch as text
    slots = {j.id: literal(p.next_run_at, BigInteger()) for j, p in items}
    states = {j.id: literal(_next_state(p), String()) for j, p in items}
    counted = {j.id: literal(int(p.action == "run"), Integer()) for j, p in items}
    return (
        update(JOBS)
        .where(
            JOBS.c.state == "active",
            or_(*(and_(by_id == j.id, JOBS.c.next_run_at == j.next_run_at) for j, _ in items)),
        )
        .values(
            next_run_at=case(slots, value=by_id),
            state=case(states, value=by_id),
            runs=JOBS.c.runs + case(counted, value=by_id),
            updated_at=now,
        )
        .returning(by_id)
    )


def _next_state(plan: Plan) -> str:
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


async def write_first(db: AsyncSession) -> None:
    """Take the write lock before any read. On SQLite a transaction that read first cannot
    upgrade once another process wrote (it fails at once, the busy timeout unused); one that
    writes first waits for the other writer like any write."""
    await db.execute(update(JOBS).where(false()).values(updated_at=0))


def owner_alive(owner: str, alive: Callable[[int], bool]) -> bool:
    parts = owner.split(":")
    return not (len(parts) >= 2 and parts[1].isdigit()) or alive(int(parts[1]))


def record(r: Any) -> RunRecord:
    return RunRecord(*r)
