"""A run's hot writes (claim, start, lease renewal, finish, delivery) as one interface with two
implementations: `EngineWrites` here (SQLAlchemy, PostgreSQL's, and SQLite's when the store has
no fast path) and `sqlite_writes.SqliteWrites` (raw statements on the store's SQLite writer).
Each call is one transaction, a background write (chat writes waiting go first)."""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

from sqlalchemy import (
    BigInteger,
    Float,
    Integer,
    String,
    Text,
    and_,
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
from sqlalchemy.ext.asyncio import AsyncSession

from hermes_gateway.scheduler.batch import Finish
from hermes_gateway.scheduler.jobs import LIVE, Job, Plan
from hermes_gateway.scheduler.rows import JOBS, RUNS, next_state, run_row
from hermes_gateway.store.store import Store

# What a claim raises when the unique (job_id, scheduled_for) key refuses a run row: the
# whole transaction is rolled back, nothing of it written
TAKEN = (IntegrityError, sqlite3.IntegrityError)
Items = list[tuple[Job, Plan]]


class LedgerWrites(Protocol):
    """The ledger's hot writes, for one owner (``owner``, ``lease_s``)."""

    async def claim(self, items: Items, now: float) -> list[int | None]:
        """In one transaction: skip the jobs with a live run (a job never overlaps itself),
        compare-and-set each other job's `next_run_at` past its slot (from the value read),
        insert a run row for each job that moved. The run ids (None: not claimed); `TAKEN`
        raised, and nothing written, when a slot's row already exists."""

    async def claim_now(self, job_id: str, now: float) -> int | None:
        """A manual run at this second; None while the job has a live run; `TAKEN`."""

    async def advance(self, items: Items, now: float) -> None:
        """Move jobs past their planned slots (a slot a manual run already served)."""

    async def start(self, starts: list[tuple[int, float]]) -> set[int]:
        """claimed -> running for each (run id, now) still claimed by us: the ids moved."""

    async def finish(self, ends: list[Finish]) -> set[int]:
        """running -> its outcome for each run still running under us; its lease runs on
        while its answer is delivered. The ids moved."""

    async def heartbeat(self, run_ids: list[int], until: float) -> int:
        """Our live runs' (and answers being delivered) leases to ``until``: how many."""

    async def delivered(self, run_id: int, delivery: str, parts_sent: int | None) -> None: ...

    async def intent(self, run_id: int, index: int, after: str) -> bool:
        """Part ``index`` of the answer is about to go out (so the ones before it went), after
        the platform reference ``after``: a crash now leaves that part in doubt. False, and
        nothing written, when the run is no longer ours (another gateway took its delivery
        over after our lease lapsed)."""


class EngineWrites:
    """`LedgerWrites` through SQLAlchemy sessions, a handful of statements per batch."""

    def __init__(self, store: Store, owner: str, lease_s: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_s = lease_s

    async def claim(self, items: Items, now: float) -> list[int | None]:
        return await self.store.write(lambda db: self._claim(db, items, now), background=True)

    async def _claim(self, db: AsyncSession, items: Items, now: float) -> list[int | None]:
        """Three statements for the whole batch: which jobs have a live run, the
        compare-and-set of every job's next slot (RETURNING the ones that moved), the run
        rows (RETURNING their ids)."""
        await write_first(db)
        wanted = [job.id for job, plan in items if plan.action == "run"]
        busy: set[str] = set()
        if wanted:
            live = (RUNS.c.status.in_(LIVE), RUNS.c.lease_until >= now)
            found = await db.scalars(select(RUNS.c.job_id).where(RUNS.c.job_id.in_(wanted), *live))
            busy = set(found)
        todo = [(j, p) for j, p in items if not (p.action == "run" and j.id in busy)]
        moved: set[str] = set()
        if todo:
            moved = set(await db.scalars(advance_all(todo, now)))
        rows = [run_row(self.owner, j.id, p, now, self.lease_s) for j, p in todo if j.id in moved]
        made: dict[str, int] = {}
        if rows:
            result = await db.execute(insert(RUNS).returning(RUNS.c.id, RUNS.c.job_id), rows)
            made = {str(job_id): int(run_id) for run_id, job_id in result}
        return [made.get(job.id) for job, _ in items]

    async def claim_now(self, job_id: str, now: float) -> int | None:
        async def run(db: AsyncSession) -> int | None:
            await write_first(db)
            busy = select(func.count()).where(
                RUNS.c.job_id == job_id, RUNS.c.status.in_(LIVE), RUNS.c.lease_until >= now
            )
            if await db.scalar(busy):
                return None
            manual = Plan("run", int(now), "manual", 0, None)
            row = run_row(self.owner, job_id, manual, now, self.lease_s)
            result: Any = await db.execute(insert(RUNS).values(**row))
            return int(result.inserted_primary_key[0])

        return await self.store.write(run, background=True)

    async def advance(self, items: Items, now: float) -> None:
        await self.store.write(lambda db: db.execute(advance_all(items, now)), background=True)

    async def start(self, starts: list[tuple[int, float]]) -> set[int]:
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
        stmt = (
            update(RUNS)
            .where(RUNS.c.id.in_(run_ids), RUNS.c.owner == self.owner)
            .where(RUNS.c.status.in_(LIVE) | (RUNS.c.delivery == "pending"))
            .values(lease_until=until)
        )

        async def run(db: AsyncSession) -> int:
            result: Any = await db.execute(stmt)
            return int(result.rowcount or 0)

        return await self.store.write(run, background=True)

    async def delivered(self, run_id: int, delivery: str, parts_sent: int | None) -> None:
        values: dict[str, Any] = {"delivery": delivery}
        if parts_sent is not None:
            values["parts_sent"] = parts_sent
        stmt = update(RUNS).where(RUNS.c.id == run_id).values(**values)
        await self.store.write(lambda db: db.execute(stmt), background=True)

    async def intent(self, run_id: int, index: int, after: str) -> bool:
        values = {"parts_sent": index, "sending": index, "sending_after": after[:128]}
        mine = (RUNS.c.id == run_id, RUNS.c.owner == self.owner)
        stmt = update(RUNS).where(*mine).values(**values)

        async def run(db: AsyncSession) -> bool:
            result: Any = await db.execute(stmt)
            return bool(result.rowcount)

        return await self.store.write(run, background=True)

    async def _ids(self, stmt: Any) -> set[int]:
        async def run(db: AsyncSession) -> set[int]:
            return {int(i) for i in await db.scalars(stmt)}

        return await self.store.write(run, background=True)


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


async def write_first(db: AsyncSession) -> None:
    """Take the write lock before any read. On SQLite a transaction that read first cannot
    upgrade once another process wrote (it fails at once, the busy timeout unused); one that
    writes first waits for the other writer like any write."""
    await db.execute(update(JOBS).where(false()).values(updated_at=0))
