"""A run's hot writes (claim, start, lease renewal, finish, delivery): each one transaction body
of SQLAlchemy Core statements, written once and run by `StoreEngine.background` on the owned
SQLite writer or on the engine (PostgreSQL). Each is a background write: chat writes waiting
for the store's lock go first."""

from __future__ import annotations

import functools
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
_RUN_COLUMNS = tuple(run_row("", "", Plan("run", 0, "", 0, None), 0.0, 0.0))
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
        moved = _advance(db, todo, now)
        rows = [run_row(self.owner, j.id, p, now, self.lease_s) for j, p in todo if j.id in moved]
        made: dict[str, int] = {}
        if rows:
            params = {f"{k}{i}": v for i, row in enumerate(rows) for k, v in row.items()}
            found = db.fetch(_insert_runs(len(rows)), params)
            made = {str(job_id): int(run_id) for run_id, job_id in found}
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
        await self._run(lambda db: _advance(db, items, now))

    async def start(self, starts: list[tuple[int, float]]) -> set[int]:
        """claimed -> running for each (run id, now) still claimed by us: the ids moved."""
        params: dict[str, Any] = {"mine": self.owner}
        for i, (run_id, now) in enumerate(starts):
            params.update({f"r{i}": run_id, f"at{i}": now})
        return await self._ids(_start(len(starts)), params)

    async def finish(self, ends: list[Finish]) -> set[int]:
        """running -> its outcome for each run still running under us; its lease runs on
        while its answer is delivered. The ids moved."""
        params: dict[str, Any] = {"mine": self.owner}
        for i, e in enumerate(ends):
            until = e.now + self.lease_s
            values = (e.run_id, e.status, e.now, e.output, e.error, e.delivery, until, e.files)
            params.update(zip((f"{k}{i}" for k in _FINISHED), values, strict=True))
        return await self._ids(_finish(len(ends)), params)

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

    async def _ids(self, stmt: Any, params: dict[str, Any]) -> set[int]:
        return await self._run(lambda db: {int(r[0]) for r in db.fetch(stmt, params)})


# The batch statements: one per batch size, built with bound parameters (p0, p1, ...) and
# cached, so each executor compiles one once (a statement with the values baked in would be
# compiled again for every batch: milliseconds, inside the write transaction)
_SIZES = 64  # more than a batch's length can be (scheduler.CLAIM_CHUNK, batch.MAX_BATCH)
_FINISHED = ("r", "status", "at", "output", "error", "how", "until", "files")


def _advance(db: Executor, items: Items, now: float) -> set[str]:
    """The compare-and-set of each job's next slot, from the value read: the ids that moved."""
    if not items:
        return set()
    params: dict[str, Any] = {"now": now}
    for i, (job, p) in enumerate(items):
        values = (job.id, job.next_run_at, p.next_run_at, next_state(p), int(p.action == "run"))
        params.update(
            zip((f"j{i}", f"was{i}", f"slot{i}", f"state{i}", f"n{i}"), values, strict=True)
        )
    return {str(r[0]) for r in db.fetch(_advance_all(len(items)), params)}


@functools.lru_cache(maxsize=_SIZES)
def _advance_all(n: int) -> Any:
    """One UPDATE moving each of ``n`` jobs past its planned slot if it is still where it was
    read, RETURNING the ones that moved."""
    by_id = JOBS.c.id
    ids = [bindparam(f"j{i}", type_=String()) for i in range(n)]

    def per_job(name: str, kind: Any) -> Any:
        # typed parameters: PostgreSQL would read an untyped CASE branch as text
        return case(*((by_id == ids[i], bindparam(f"{name}{i}", type_=kind)) for i in range(n)))

    was = [bindparam(f"was{i}", type_=BigInteger()) for i in range(n)]
    return (
        update(JOBS)
        .where(
            # by key: the IN list, and the state as an expression (`|| ''`), so SQLite does
            # not pick the state's index and test every active job against each branch
            by_id.in_(ids),
            JOBS.c.state.concat("") == "active",
            or_(*(and_(by_id == ids[i], JOBS.c.next_run_at == was[i]) for i in range(n))),
        )
        .values(
            next_run_at=per_job("slot", BigInteger()),
            state=per_job("state", String()),
            runs=JOBS.c.runs + per_job("n", Integer()),
            updated_at=bindparam("now", type_=Float()),
        )
        .returning(by_id)
    )


@functools.lru_cache(maxsize=_SIZES)
def _insert_runs(n: int) -> Any:
    """One INSERT of ``n`` run rows, RETURNING (id, job_id) of each."""
    columns = [RUNS.c[k] for k in _RUN_COLUMNS]
    rows = [{c.key: bindparam(f"{c.key}{i}", type_=c.type) for c in columns} for i in range(n)]
    return insert(RUNS).values(rows).returning(RUNS.c.id, RUNS.c.job_id)


def _by_run(name: str, n: int, kind: Any) -> Any:
    """Per run of the batch, its own value of ``name`` (typed, as in `_advance_all`)."""
    return case(
        *((RUNS.c.id == bindparam(f"r{i}"), bindparam(f"{name}{i}", type_=kind)) for i in range(n))
    )


def _ours(n: int, status: str) -> tuple[Any, ...]:
    ids = RUNS.c.id.in_([bindparam(f"r{i}", type_=Integer()) for i in range(n)])
    return (ids, RUNS.c.owner == bindparam("mine"), RUNS.c.status == status)


@functools.lru_cache(maxsize=_SIZES)
def _start(n: int) -> Any:
    return (
        update(RUNS)
        .where(*_ours(n, "claimed"))
        .values(status="running", started_at=_by_run("at", n, Float()))
        .returning(RUNS.c.id)
    )


@functools.lru_cache(maxsize=_SIZES)
def _finish(n: int) -> Any:
    return (
        update(RUNS)
        .where(*_ours(n, "running"))
        .values(
            status=_by_run("status", n, String()),
            finished_at=_by_run("at", n, Float()),
            output=_by_run("output", n, Text()),
            error=_by_run("error", n, Text()),
            delivery=_by_run("how", n, String()),
            lease_until=_by_run("until", n, Float()),
            output_files=_by_run("files", n, Text()),
        )
        .returning(RUNS.c.id)
    )
