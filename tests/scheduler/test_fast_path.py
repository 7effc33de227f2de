"""A run's hot writes (claim, start, lease renewal, finish, delivery) take SQLite's fast path,
the store's writer connection with no SQLAlchemy in between, and the engine on PostgreSQL; on
the fast path too a job write lets a chat write that is waiting go first."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from hermes_gateway.scheduler.jobs import plan
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.store.store import Store
from tests.scheduler.test_batch import count_writes
from tests.scheduler.test_ledger import T0, hourly, url  # noqa: F401  # the fixture

pytestmark = pytest.mark.asyncio


async def test_a_runs_hot_writes_take_sqlites_fast_path(url: str) -> None:  # noqa: F811
    store = Store(url)
    await store.open()
    try:
        ledger = Ledger(store, "host:1:a", 60)
        job = hourly()
        await ledger.add(job, T0)
        writes = count_writes(store)
        now = T0 + 3600
        [due] = await ledger.due(now)
        p = plan(due, now, 3600)
        assert p is not None
        run_id = await ledger.claim(due, p, now)
        assert run_id is not None and await ledger.start(run_id, now)
        assert await ledger.heartbeat([run_id], now + 1) == 1
        assert await ledger.finish(run_id, "succeeded", now + 2, "ok", None, "pending")
        await ledger.delivered(run_id, "pending", 1)
        await ledger.delivered(run_id, "delivered")
        manual = await ledger.claim_now(job, now + 3)
        assert manual is not None
        assert writes == ["sqlite" if url.startswith("sqlite") else "engine"] * 7
        [again, first] = await ledger.runs(job.id)
        assert (first.status, first.started_at, first.finished_at) == ("succeeded", now, now + 2)
        assert (first.delivery, first.parts_sent, first.output) == ("delivered", 1, "ok")
        assert (again.id, again.kind, again.status) == (manual, "manual", "claimed")
        moved = await ledger.get(job.id)
        assert moved is not None and (moved.next_run_at, moved.runs) == (T0 + 7200, 1)
    finally:
        await store.close()


async def test_a_fast_path_job_write_lets_a_queued_chat_write_go_first(tmp_path: Path) -> None:
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        order: list[str] = []
        release = asyncio.Event()

        async def hold(db: object) -> None:
            order.append("held")
            await release.wait()

        def job(conn: sqlite3.Connection) -> None:
            order.append("job")

        async def chat(db: object) -> None:
            order.append("chat")

        holder = asyncio.create_task(store.write(hold))
        await asyncio.sleep(0.05)
        queued = asyncio.create_task(store.write_sqlite(job))
        await asyncio.sleep(0.05)
        message = asyncio.create_task(store._hot(chat))
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(holder, queued, message)
        assert order == ["held", "chat", "job"]
    finally:
        await store.close()


async def test_a_failed_fast_path_write_leaves_nothing_behind(tmp_path: Path) -> None:
    """The unique slot key refusing one run row rolls the whole claim back: the compare-and-set
    made before it in the same transaction is undone too."""
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        ledger = Ledger(store, "host:1:a", 60)
        first, second = hourly(), hourly()
        for j in (first, second):
            await ledger.add(j, T0)
        slot = T0 + 3600
        manual = await ledger.claim_now(second, slot)  # takes the second's slot, and ends
        assert manual is not None and await ledger.start(manual, slot)
        assert await ledger.finish(manual, "succeeded", slot, "ok", None, "delivered")
        items = [(j, p) for j in (first, second) if (p := plan(j, slot, 3600)) is not None]
        with pytest.raises(sqlite3.IntegrityError):
            await ledger.writes.claim(items, slot)
        untouched = await ledger.get(first.id)
        assert untouched is not None and (untouched.next_run_at, untouched.runs) == (slot, 0)
        assert [r.kind for r in await ledger.runs()] == ["manual"]
        # the connection is left clean: the next claim on it works, passing the taken slot
        got = await ledger.claim_batch(items, slot)
        assert got[0] is not None and got[1] is None
        moved = await ledger.get(first.id)
        assert moved is not None and (moved.next_run_at, moved.runs) == (slot + 3600, 1)
    finally:
        await store.close()
