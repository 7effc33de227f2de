"""The store side of scheduled jobs: definitions in `cron_jobs`, one `cron_runs` row per slot.

A slot is claimed in one transaction that moves the job's `next_run_at` on (compare-and-set on
its old value) and inserts the run row (unique per job and slot), so of several schedulers on
one database exactly one claims it. A claim is a lease the claimer's heartbeat renews; a run
whose lease ran out is `abandoned`, never left `running`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from functools import partial
from typing import Any, TypeVar

import structlog
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from hermes_gateway.events import OutboundFile
from hermes_gateway.scheduler.batch import Coalescer, Finish
from hermes_gateway.scheduler.jobs import LIVE, Job, Plan, RunRecord, job_from_row
from hermes_gateway.scheduler.ledger_tx import TAKEN, LedgerWrites
from hermes_gateway.scheduler.rows import JOBS, RECORD, RUNS, job_row, owner_alive, record
from hermes_gateway.store.models import CronJobRow
from hermes_gateway.store.store import Store

T = TypeVar("T")
log = structlog.get_logger("hermes.scheduler")
# A job write is followed by a pause this many times its length: a burst of jobs holds the
# store's write lock (and the event loop) at most a fifth of the time, so a chat message's
# writes rarely find it taken. The burst takes longer; a chat's latency stays.
PACE = 4.0
# lease renewals per write: a burst holds thousands of claimed runs, renewed a slice at a time
HEARTBEAT_CHUNK = 500


class Ledger:
    """Jobs and runs of one store; ``owner`` names this process on the leases it takes."""

    def __init__(self, store: Store, owner: str, lease_s: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_s = lease_s
        # the store serializes writes in arrival order: one job write waiting at a time
        # keeps a burst of jobs from queueing ahead of a chat message's writes
        self._writing = asyncio.Semaphore(1)
        self._starts: Coalescer[tuple[int, float], bool] = Coalescer(self._start_batch)
        self._finishes: Coalescer[Finish, bool] = Coalescer(self._finish_batch)
        self.writes = LedgerWrites(store, owner, lease_s)  # the hot writes
        # jobs whose stored schedule cannot be used: why, logged once; the due query passes
        # them over, so a pile of them never fills the batches other jobs are claimed from
        self.set_aside: dict[str, str] = {}

    async def _paced(self, call: Callable[[], Awaitable[T]]) -> T:
        """One job write at a time, followed by its pause."""
        async with self._writing:
            started = time.perf_counter()
            try:
                return await call()
            finally:
                await asyncio.sleep(PACE * (time.perf_counter() - started))

    async def _write(self, fn: Callable[[AsyncSession], Awaitable[T]]) -> T:
        return await self._paced(lambda: self.store.write(fn, background=True))

    async def settle(self) -> None:
        """Wait for the batched state changes under way."""
        await self._starts.settle()
        await self._finishes.settle()

    # -- jobs ---------------------------------------------------------------------------

    async def add(self, job: Job, now: float) -> None:
        row = job_row(job, now)
        await self._write(lambda db: db.execute(insert(JOBS).values(**row)))

    async def get(self, job_id: str) -> Job | None:
        async def run(db: AsyncSession) -> Job | None:
            row = await db.get(CronJobRow, job_id)
            return None if row is None else job_from_row(row)

        return await self.store.read(run)

    async def jobs(self, platform: str | None = None, chat_id: str | None = None) -> list[Job]:
        """Every job, or those made in one chat, oldest first."""
        stmt = select(CronJobRow).order_by(CronJobRow.created_at)
        if platform is not None:
            stmt = stmt.where(CronJobRow.origin_platform == platform)
        if chat_id is not None:
            stmt = stmt.where(CronJobRow.origin_chat_id == chat_id)

        async def run(db: AsyncSession) -> list[Job]:
            return [job_from_row(r) for r in (await db.scalars(stmt)).all()]

        return await self.store.read(run)

    async def change(self, job_id: str, now: float, **values: Any) -> bool:
        """Set columns of a job (state, next_run_at, prompt, ...); False if it is gone."""
        stmt = update(JOBS).where(JOBS.c.id == job_id).values(updated_at=now, **values)
        if "schedule" in values:  # a new schedule, checked: the timer may take the job again
            self.set_aside.pop(job_id, None)
        return await self._count(stmt) == 1

    async def remove(self, job_id: str) -> bool:
        async def run(db: AsyncSession) -> int:
            await db.execute(delete(RUNS).where(RUNS.c.job_id == job_id))
            gone = await db.execute(delete(JOBS).where(JOBS.c.id == job_id))
            return int(gone.rowcount or 0)  # type: ignore[attr-defined]

        removed = await self._write(run) == 1
        # after the delete: a tick reading the due jobs meanwhile would set it aside again
        self.set_aside.pop(job_id, None)
        return removed

    async def due(self, now: float, limit: int = 500) -> list[Job]:
        """Active jobs whose slot has come, earliest first. A job whose stored schedule cannot
        be used is set aside (`put_aside`) and the batch read again without it, so a pile of
        them never fills the batch the other jobs are claimed from."""
        while True:
            # paced: a burst reads thousands, as it writes them
            jobs = await self._paced(lambda: self.store.read(partial(self._due, now, limit)))
            bad = [job for job in jobs if job.problem is not None]
            for job in bad:
                self.put_aside(job.id, str(job.problem))
            if not bad:
                return jobs

    async def _due(self, now: float, limit: int, db: AsyncSession) -> list[Job]:
        # plain rows, not ORM objects: a burst reads thousands, on the event loop
        stmt = select(JOBS).where(JOBS.c.state == "active", JOBS.c.next_run_at <= now)
        if self.set_aside:
            stmt = stmt.where(JOBS.c.id.not_in(list(self.set_aside)))
        rows: Any = await db.execute(stmt.order_by(JOBS.c.next_run_at).limit(limit))
        return [job_from_row(r) for r in rows]

    def put_aside(self, job_id: str, problem: str) -> None:
        """The timer passes this job over from now on (until its schedule is changed here);
        logged once."""
        if job_id not in self.set_aside:
            self.set_aside[job_id] = problem
            log.error("job.unusable", job_id=job_id, problem=problem)

    # -- claiming slots -----------------------------------------------------------------

    async def claim(self, job: Job, plan: Plan, now: float) -> int | None:
        """Claim ``plan.slot`` (a run), or record it skipped or missed; moves the job to its
        next slot. None when another scheduler was first, or the job's previous run is still
        live (a job never overlaps itself: the slot stays due)."""
        return (await self.claim_batch([(job, plan)], now))[0]

    async def claim_batch(self, items: list[tuple[Job, Plan]], now: float) -> list[int | None]:
        """`claim` for several jobs in one transaction (a burst of due jobs costs one commit
        per batch, not per job); each job's claim stands or fails alone. A slot taken
        meanwhile by a "run now" of the same second fails the batch: then one by one, and that
        slot is passed over (the manual run served it)."""
        if len(items) > 1:
            try:
                return await self._paced(lambda: self.writes.claim(items, now))
            except TAKEN:
                pass
        out: list[int | None] = []
        for item in items:
            one = [item]
            try:
                out += await self._paced(partial(self.writes.claim, one, now))
            except TAKEN:  # a "run now" took this very second: that run serves it
                await self._paced(partial(self.writes.advance, one, now))
                out.append(None)
        return out

    async def claim_now(self, job: Job, now: float) -> int | None:
        """ "Run now": a slot of its own at this second, the schedule untouched; None when the
        job's previous run is still live (or another "run now" took this second)."""
        try:
            return await self._paced(lambda: self.writes.claim_now(job.id, now))
        except TAKEN:
            return None

    # -- a run's life -------------------------------------------------------------------

    async def start(self, run_id: int, now: float) -> bool:
        """claimed -> running; False if it is no longer ours (reaped meanwhile). The runs
        starting at the same moment share one transaction."""
        return await self._starts((run_id, now))

    async def _start_batch(self, starts: list[tuple[int, float]]) -> list[bool]:
        moved = await self._paced(lambda: self.writes.start(starts))
        return [run_id in moved for run_id, _ in starts]

    async def heartbeat(self, run_ids: list[int], now: float) -> int:
        """Renew the leases of our live runs (and of answers we are still delivering)."""
        renewed, until = 0, now + self.lease_s
        for start in range(0, len(run_ids), HEARTBEAT_CHUNK):
            chunk = run_ids[start : start + HEARTBEAT_CHUNK]
            renewed += await self._paced(partial(self.writes.heartbeat, chunk, until))
        return renewed

    async def finish(
        self,
        run_id: int,
        status: str,
        now: float,
        output: str | None,
        error: str | None,
        delivery: str,
        files: tuple[OutboundFile, ...] = (),
    ) -> bool:
        """running -> its outcome, with the answer to deliver (``delivery`` pending) or not,
        and the ``files`` it sends after its text; the lease runs on while it is delivered.
        False if it is no longer ours."""
        stored = json.dumps([asdict(f) for f in files]) if files else None
        return await self._finishes(Finish(run_id, status, now, output, error, delivery, stored))

    async def _finish_batch(self, ends: list[Finish]) -> list[bool]:
        moved = await self._paced(lambda: self.writes.finish(ends))
        done = [end for end in ends if end.run_id in moved]
        if done:  # one line per batch: a burst finishes thousands of runs
            outcomes = Counter(end.status for end in done)
            run_ids = [end.run_id for end in done]
            log.info("job.finished", count=len(done), outcomes=dict(outcomes), run_ids=run_ids)
        return [end.run_id in moved for end in ends]

    async def delivered(self, run_id: int, delivery: str, parts_sent: int | None = None) -> None:
        await self._paced(lambda: self.writes.delivered(run_id, delivery, parts_sent))

    async def intent(self, run_id: int, index: int, after: str) -> bool:
        """Before part ``index`` of the answer can reach the platform; False when the run's
        delivery is another gateway's now (`LedgerWrites.intent`)."""
        return await self._paced(lambda: self.writes.intent(run_id, index, after))

    async def let_go(self, run_ids: list[int], now: float) -> None:
        """A clean stop: our runs still running are abandoned at once, and the answers we are
        still delivering are left for the next start (their lease ends now)."""
        if not run_ids:
            return

        async def run(db: AsyncSession) -> None:
            # a queue of thousands of claimed runs: in slices, within the drivers' parameter
            # limits, in one transaction
            for start in range(0, len(run_ids), 5000):
                mine = (RUNS.c.id.in_(run_ids[start : start + 5000]), RUNS.c.owner == self.owner)
                await db.execute(
                    update(RUNS)
                    .where(*mine, RUNS.c.status.in_(LIVE))
                    .values(
                        status="abandoned", finished_at=now, delivery="skipped", error="stopped"
                    )
                )
                await db.execute(
                    update(RUNS).where(*mine, RUNS.c.delivery == "pending").values(lease_until=now)
                )

        await self._write(run)

    async def take_back(self, host: str, alive: Callable[[int], bool], now: float) -> int:
        """At start: what a process of this host that is gone held (a live run, an answer
        being delivered) is freed now rather than when its lease lapses; the next tick
        reaps or delivers it. Owners are ``host:pid:...``."""
        held = (RUNS.c.status.in_(LIVE)) | (RUNS.c.delivery == "pending")
        mine = RUNS.c.owner.like(f"{host}:%")

        async def run(db: AsyncSession) -> int:
            rows = await db.execute(select(RUNS.c.id, RUNS.c.owner).where(held, mine))
            dead = [i for i, owner in rows if not owner_alive(owner, alive)]
            if dead:
                await db.execute(
                    update(RUNS).where(RUNS.c.id.in_(dead), held).values(lease_until=now - 1)
                )
            return len(dead)

        return await self._write(run)

    async def reap(self, now: float) -> list[RunRecord]:
        """Mark `abandoned` every live run whose lease expired (its process died)."""

        async def run(db: AsyncSession) -> list[RunRecord]:
            cond = (RUNS.c.status.in_(LIVE), RUNS.c.lease_until < now)
            rows = [record(r) for r in await db.execute(select(*RECORD).where(*cond))]
            if rows:
                ids = [r.id for r in rows]
                await db.execute(
                    update(RUNS)
                    .where(RUNS.c.id.in_(ids), *cond)
                    .values(status="abandoned", finished_at=now, delivery="skipped")
                )
            return rows

        return await self._write(run)

    async def adopt_undelivered(self, now: float) -> list[RunRecord]:
        """Answers computed but not delivered whose deliverer's lease expired: now ours."""
        cond = (
            RUNS.c.status == "succeeded",
            RUNS.c.delivery == "pending",
            RUNS.c.lease_until < now,
        )

        async def run(db: AsyncSession) -> list[RunRecord]:
            rows = [record(r) for r in await db.execute(select(*RECORD).where(*cond))]
            if rows:
                await db.execute(
                    update(RUNS)
                    .where(RUNS.c.id.in_([r.id for r in rows]), *cond)
                    .values(owner=self.owner, lease_until=now + self.lease_s)
                )
            return rows

        return await self._write(run)

    # -- reading ------------------------------------------------------------------------

    async def runs(self, job_id: str | None = None, limit: int = 20) -> list[RunRecord]:
        """The newest runs (of one job), newest first."""
        stmt = select(*RECORD).order_by(RUNS.c.id.desc()).limit(limit)
        if job_id is not None:
            stmt = stmt.where(RUNS.c.job_id == job_id)

        async def run(db: AsyncSession) -> list[RunRecord]:
            return [record(r) for r in await db.execute(stmt)]

        return await self.store.read(run)

    async def counts(self) -> dict[str, dict[str, int]]:
        """Jobs by state and runs by status, for /status and /metrics."""

        async def run(db: AsyncSession) -> dict[str, dict[str, int]]:
            jobs = await db.execute(select(JOBS.c.state, func.count()).group_by(JOBS.c.state))
            runs = await db.execute(select(RUNS.c.status, func.count()).group_by(RUNS.c.status))
            due = await db.scalar(
                select(func.min(JOBS.c.next_run_at)).where(JOBS.c.state == "active")
            )
            return {
                "jobs": {str(k): int(n) for k, n in jobs},
                "runs": {str(k): int(n) for k, n in runs},
                "next_due": {"at": int(due)} if due is not None else {},
            }

        return await self.store.read(run)

    async def _count(self, stmt: Any) -> int:
        async def run(db: AsyncSession) -> int:
            result: Any = await db.execute(stmt)
            return int(result.rowcount or 0)

        return await self._write(run)
