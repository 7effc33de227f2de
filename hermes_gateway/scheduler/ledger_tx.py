"""A run's hot writes (claim, start, lease renewal, finish, delivery): each one transaction body
of SQLAlchemy Core statements, written once and run by `StoreEngine.background` on the owned
SQLite writer or on the engine (PostgreSQL). Each is a background write: chat writes waiting
for the store's lock go first."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Float,
    Integer,
    String,
    Text,
    and_,
    bindparam,
    case,
    false,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from hermes_gateway.scheduler.batch import Finish
from hermes_gateway.scheduler.jobs import LIVE, Job, Plan
from hermes_gateway.scheduler.rows import JOBS, RUNS, next_state, run_row
from hermes_gateway.store.executor import Executor
from hermes_gateway.store.store import Store

T = TypeVar("T")
# What a claim raises when the unique (job_id, scheduled_for) key refuses a run row (sqlite3's
# on the owned SQLite writer, SQLAlchemy's on the engine): the whole transaction is rolled
# back, nothing of it written
TAKEN = (IntegrityError, sqlite3.IntegrityError)
Items = list[tuple[Job, Plan]]

_LIVE_NOW = (RUNS.c.status.in_(LIVE), RUNS.c.lease_until >= bindparam("now", type_=Float()))
_BUSY = select(RUNS.c.job_id).where(
    RUNS.c.job_id.in_(bindparam("jobs", expanding=True)), *_LIVE_NOW
)
_BUSY_ONE = select(func.count()).where(RUNS.c.job_id == bindparam("job"), *_LIVE_NOW)
_INSERT_RUN = insert(RUNS)
_MINE: Any = (RUNS.c.id.in_(bindparam("ids", expanding=True)), RUNS.c.owner == bindparam("mine"))
_HEARTBEAT = (
    update(RUNS)
    .where(*_MINE, RUNS.c.status.in_(LIVE) | (RUNS.c.delivery == "pending"))
    .values(lease_until=bindparam("until"))
)
_DELIVERED = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("run"))
    .values(
        delivery=bindparam("how"),
        parts_sent=func.coalesce(bindparam("parts", type_=Integer()), RUNS.c.parts_sent),
    )
)
_INTENT = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("run"), RUNS.c.owner == bindparam("mine"))
    .values(parts_sent=bindparam("idx"), sending=bindparam("idx"), sending_after=bindparam("after"))
)
# Take the write lock before any read. On SQLite a transaction that read first cannot upgrade
# once another process wrote (it fails at once, the busy timeout unused); one that writes first
# waits for the other writer like any write. (The owned writer begins IMMEDIATE anyway.)
_WRITE_FIRST = update(JOBS).where(false()).values(updated_at=0)


class LedgerWrites:
    """The ledger's hot writes, for one owner (``owner``, ``lease_s``)."""

    def __init__(self, store: Store, owner: str, lease_s: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_s = lease_s

    async def _run(self, body: Callable[[Executor], T]) -> T:
        return await self.store.background(body)

    async def claim(self, items: Items, now: float) -> list[int | None]:
        """In one transaction: skip the jobs with a live run (a job never overlaps itself),
        compare-and-set each other job's `next_run_at` past its slot (from the value read),
        insert a run row for each job that moved. The run ids (None: not claimed); `TAKEN`
        raised, and nothing written, when a slot's row already exists."""
        return await self._run(lambda db: self._claim(db, items, now))

    def _claim(self, db: Executor, items: Items, now: float) -> list[int | None]:
        """Three statements for the whole batch: which jobs have a live run, the
        compare-and-set of every job's next slot (RETURNING the ones that moved), the run
        rows (RETURNING their ids)."""
        db.execute(_WRITE_FIRST)
        wanted = [job.id for job, plan in items if plan.action == "run"]
        busy: set[str] = set()
        if wanted:
            busy = {str(r[0]) for r in db.fetch(_BUSY, {"jobs": wanted, "now": now})}
        todo = [(j, p) for j, p in items if not (p.action == "run" and j.id in busy)]
        moved: set[str] = set()
        if todo:
            moved = {str(r[0]) for r in db.fetch(advance_all(todo, now))}
        rows = [run_row(self.owner, j.id, p, now, self.lease_s) for j, p in todo if j.id in moved]
        made: dict[str, int] = {}
        if rows:
            stmt = insert(RUNS).values(rows).returning(RUNS.c.id, RUNS.c.job_id)
            made = {str(job_id): int(run_id) for run_id, job_id in db.fetch(stmt)}
        return [made.get(job.id) for job, _ in items]

    async def claim_now(self, job_id: str, now: float) -> int | None:
        """A manual run at this second; None while the job has a live run; `TAKEN`."""

        def run(db: Executor) -> int | None:
            db.execute(_WRITE_FIRST)
            if db.fetch(_BUSY_ONE, {"job": job_id, "now": now})[0][0]:
                return None
            manual = Plan("run", int(now), "manual", 0, None)
            return db.insert(_INSERT_RUN, run_row(self.owner, job_id, manual, now, self.lease_s))

        return await self._run(run)

    async def advance(self, items: Items, now: float) -> None:
        """Move jobs past their planned slots (a slot a manual run already served)."""
        await self._run(lambda db: db.fetch(advance_all(items, now)))

    async def start(self, starts: list[tuple[int, float]]) -> set[int]:
        """claimed -> running for each (run id, now) still claimed by us: the ids moved."""
        stmt = (
            update(RUNS)
            .where(
                RUNS.c.id.in_([run_id for run_id, _ in starts]),
                RUNS.c.owner == self.owner,
                RUNS.c.status == "claimed",
            )
            .values(status="running", started_at=_by_run(dict(starts), Float()))
            .returning(RUNS.c.id)
        )
        return await self._ids(stmt)

    async def finish(self, ends: list[Finish]) -> set[int]:
        """running -> its outcome for each run still running under us; its lease runs on
        while its answer is delivered. The ids moved."""
        stmt = (
            update(RUNS)
            .where(
                RUNS.c.id.in_([e.run_id for e in ends]),
                RUNS.c.owner == self.owner,
                RUNS.c.status == "running",
            )
            .values(
                status=_by_run({e.run_id: e.status for e in ends}, String()),
                finished_at=_by_run({e.run_id: e.now for e in ends}, Float()),
                output=_by_run({e.run_id: e.output for e in ends}, Text()),
                error=_by_run({e.run_id: e.error for e in ends}, Text()),
                delivery=_by_run({e.run_id: e.delivery for e in ends}, String()),
                lease_until=_by_run({e.run_id: e.now + self.lease_s for e in ends}, Float()),
            )
            .returning(RUNS.c.id)
        )
        return await self._ids(stmt)

    async def heartbeat(self, run_ids: list[int], until: float) -> int:
        """Our live runs' (and answers being delivered) leases to ``until``: how many."""
        params = {"ids": run_ids, "mine": self.owner, "until": until}
        return await self._run(lambda db: db.execute(_HEARTBEAT, params))

    async def delivered(self, run_id: int, delivery: str, parts_sent: int | None) -> None:
        params = {"run": run_id, "how": delivery, "parts": parts_sent}
        await self._run(lambda db: db.execute(_DELIVERED, params))

    async def intent(self, run_id: int, index: int, after: str) -> bool:
        """Part ``index`` of the answer is about to go out (so the ones before it went), after
        the platform reference ``after``: a crash now leaves that part in doubt. False, and
        nothing written, when the run is no longer ours (another gateway took its delivery
        over after our lease lapsed)."""
        params = {"run": run_id, "mine": self.owner, "idx": index, "after": after[:128]}
        return await self._run(lambda db: db.execute(_INTENT, params) == 1)

    async def _ids(self, stmt: Any) -> set[int]:
        return await self._run(lambda db: {int(r[0]) for r in db.fetch(stmt)})


def advance_all(items: Items, now: float) -> Any:
    """One UPDATE moving each job past its planned slot if it is still where it was read."""
    by_id = JOBS.c.id
    # typed literals: PostgreSQL would read an untyped CASE branch as text
    slots = {j.id: literal(p.next_run_at, BigInteger()) for j, p in items}
    states = {j.id: literal(next_state(p), String()) for j, p in items}
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


def _by_run(values: dict[int, Any], kind: Any) -> Any:
    # typed literals: PostgreSQL would read an untyped CASE branch as text
    return case({i: literal(v, kind) for i, v in values.items()}, value=RUNS.c.id)
