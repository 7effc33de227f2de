"""The ledger's hot writes on SQLite's fast path: the transactions of `writes.EngineWrites` as
plain statements, each transaction one call on the store's writer connection and its thread
(`StoreEngine.write_sqlite`), the connection chat writes take. Through an SQLAlchemy session
over aiosqlite a batch costs 2-5 ms of hops and wrapping; here it is a fraction of one, so a
chat write that finds one under way waits that much less."""

from __future__ import annotations

import sqlite3

from hermes_gateway.scheduler.batch import Finish
from hermes_gateway.scheduler.jobs import LIVE, Job, Plan
from hermes_gateway.scheduler.rows import JOBS, RUNS, next_state, run_row
from hermes_gateway.scheduler.writes import Items
from hermes_gateway.store.store import Store

_RUNS, _JOBS = RUNS.name, JOBS.name
_LIVE = f"status IN ({', '.join(repr(s) for s in LIVE)})"
_RUN_COLUMNS = tuple(run_row("", "", Plan("run", 0, "", 0, None), 0.0, 0.0))
_INSERT_RUN = (
    f"INSERT INTO {_RUNS} ({', '.join(_RUN_COLUMNS)}) VALUES ({', '.join('?' * len(_RUN_COLUMNS))})"
)
# the compare-and-set: moves the job on only from the slot the tick read
_ADVANCE = (
    f"UPDATE {_JOBS} SET next_run_at = ?, state = ?, runs = runs + ?, updated_at = ? "
    f"WHERE id = ? AND state = 'active' AND next_run_at = ?"
)
_START = (
    f"UPDATE {_RUNS} SET status = 'running', started_at = ? "
    f"WHERE id = ? AND owner = ? AND status = 'claimed'"
)
_FINISH = (
    f"UPDATE {_RUNS} SET status = ?, finished_at = ?, output = ?, error = ?, delivery = ?, "
    f"lease_until = ? WHERE id = ? AND owner = ? AND status = 'running'"
)


def _in(n: int) -> str:
    return ", ".join("?" * n)


class SqliteWrites:
    """`writes.LedgerWrites` on the store's SQLite fast path."""

    def __init__(self, store: Store, owner: str, lease_s: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_s = lease_s

    async def claim(self, items: Items, now: float) -> list[int | None]:
        return await self.store.write_sqlite(lambda conn: self._claim(conn, items, now))

    def _claim(self, conn: sqlite3.Connection, items: Items, now: float) -> list[int | None]:
        wanted = [job.id for job, p in items if p.action == "run"]
        busy: set[str] = set()
        if wanted:
            sql = (
                f"SELECT job_id FROM {_RUNS} WHERE job_id IN ({_in(len(wanted))}) "
                f"AND {_LIVE} AND lease_until >= ?"
            )
            busy = {str(r[0]) for r in conn.execute(sql, (*wanted, now))}
        out: list[int | None] = []
        for job, p in items:
            # a job never overlaps itself: while a run of it is live, its slot stays due
            if (p.action == "run" and job.id in busy) or not _advance(conn, job, p, now):
                out.append(None)
                continue
            row = run_row(self.owner, job.id, p, now, self.lease_s)
            out.append(conn.execute(_INSERT_RUN, tuple(row.values())).lastrowid)
        return out

    async def claim_now(self, job_id: str, now: float) -> int | None:
        def run(conn: sqlite3.Connection) -> int | None:
            sql = f"SELECT 1 FROM {_RUNS} WHERE job_id = ? AND {_LIVE} AND lease_until >= ?"
            if conn.execute(sql, (job_id, now)).fetchone() is not None:
                return None
            manual = Plan("run", int(now), "manual", 0, None)
            row = run_row(self.owner, job_id, manual, now, self.lease_s)
            return conn.execute(_INSERT_RUN, tuple(row.values())).lastrowid

        return await self.store.write_sqlite(run)

    async def advance(self, items: Items, now: float) -> None:
        def run(conn: sqlite3.Connection) -> None:
            for job, p in items:
                _advance(conn, job, p, now)

        await self.store.write_sqlite(run)

    async def start(self, starts: list[tuple[int, float]]) -> set[int]:
        def run(conn: sqlite3.Connection) -> set[int]:
            return {
                run_id
                for run_id, now in starts
                if conn.execute(_START, (now, run_id, self.owner)).rowcount == 1
            }

        return await self.store.write_sqlite(run)

    async def finish(self, ends: list[Finish]) -> set[int]:
        def run(conn: sqlite3.Connection) -> set[int]:
            moved = set()
            for e in ends:
                params = (e.status, e.now, e.output, e.error, e.delivery, e.now + self.lease_s)
                if conn.execute(_FINISH, (*params, e.run_id, self.owner)).rowcount == 1:
                    moved.add(e.run_id)
            return moved

        return await self.store.write_sqlite(run)

    async def heartbeat(self, run_ids: list[int], until: float) -> int:
        sql = (
            f"UPDATE {_RUNS} SET lease_until = ? WHERE id IN ({_in(len(run_ids))}) "
            f"AND owner = ? AND ({_LIVE} OR delivery = 'pending')"
        )
        params = (until, *run_ids, self.owner)
        return await self.store.write_sqlite(lambda conn: conn.execute(sql, params).rowcount)

    async def delivered(self, run_id: int, delivery: str, parts_sent: int | None) -> None:
        sql = f"UPDATE {_RUNS} SET delivery = ?, parts_sent = coalesce(?, parts_sent) WHERE id = ?"
        params = (delivery, parts_sent, run_id)
        await self.store.write_sqlite(lambda conn: conn.execute(sql, params))

    async def intent(self, run_id: int, index: int, after: str) -> bool:
        sql = (
            f"UPDATE {_RUNS} SET parts_sent = ?, sending = ?, sending_after = ? "
            f"WHERE id = ? AND owner = ?"
        )
        params = (index, index, after[:128], run_id, self.owner)
        return await self.store.write_sqlite(lambda conn: conn.execute(sql, params).rowcount == 1)


def _advance(conn: sqlite3.Connection, job: Job, p: Plan, now: float) -> bool:
    """The compare-and-set of one job's next slot: whether it moved."""
    params = (p.next_run_at, next_state(p), int(p.action == "run"), now, job.id, job.next_run_at)
    return conn.execute(_ADVANCE, params).rowcount == 1
