"""Runs that start or finish at the same moment share one write transaction (on SQLite and
PostgreSQL), each keeping its own guard: a run that is no longer ours reports False, the others
move; and a job write waits while a chat message's write is queued for the store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.scheduler.jobs import new_job, plan
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import parse
from hermes_gateway.store.store import Store
from tests.scheduler.test_ledger import CHAT, T0, url  # noqa: F401  # the fixture

pytestmark = pytest.mark.asyncio


async def claimed_runs(ledger: Ledger, n: int) -> list[int]:
    jobs = []
    for i in range(n):
        job = new_job(
            name=f"j{i}", prompt="p", schedule=parse("0 * * * *", "UTC", T0), origin=CHAT, now=T0
        )
        await ledger.add(job, T0)
        jobs.append(job)
    now = T0 + 3600
    items = [(j, p) for j in jobs if (p := plan(j, now, 3600, 60)) is not None]
    ids = await ledger.claim_batch(items, now)
    assert None not in ids
    return [i for i in ids if i is not None]


def count_writes(store: Store) -> list[str]:
    """The write transactions the store runs, one entry each: through an SQLAlchemy session
    ("engine") or on the SQLite fast path's connection ("sqlite")."""
    seen: list[str] = []
    real, raw = store.write, store.write_sqlite

    async def write(fn: Any, **kw: Any) -> Any:
        seen.append("engine")
        return await real(fn, **kw)

    async def write_sqlite(fn: Any) -> Any:
        seen.append("sqlite")
        return await raw(fn)

    store.write = write  # type: ignore[method-assign]
    store.write_sqlite = write_sqlite  # type: ignore[method-assign]
    return seen


async def test_runs_starting_and_finishing_together_share_a_transaction(
    url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    store = Store(url)
    await store.open()
    try:
        ledger = Ledger(store, "host:1:a", 60)
        ids = await claimed_runs(ledger, 6)
        other = Ledger(store, "host:2:b", 60)
        now = T0 + 3601
        writes = count_writes(store)
        started = await asyncio.gather(
            *(ledger.start(i, now) for i in ids[:5]), other.start(ids[5], now)
        )
        assert started == [True] * 5 + [False]  # the last run is not the other owner's
        assert len(writes) <= 2  # ours in one transaction (the other ledger's in its own)
        writes.clear()
        ends = [ledger.finish(i, "succeeded", now + 1, f"out {i}", None, "skipped") for i in ids]
        assert await asyncio.gather(*ends) == [True] * 5 + [False]  # the 6th never started
        assert len(writes) == 1
        by_id = {r.id: r for r in await ledger.runs(limit=10)}
        assert [by_id[i].status for i in ids] == ["succeeded"] * 5 + ["claimed"]
        assert [by_id[i].output for i in ids[:5]] == [f"out {i}" for i in ids[:5]]
        assert all(by_id[i].started_at == now for i in ids[:5])
    finally:
        await store.close()


async def test_a_job_write_lets_a_queued_chat_write_go_first(tmp_path: Path) -> None:
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        order: list[str] = []
        release = asyncio.Event()

        async def hold(db: Any) -> None:
            order.append("held")
            await release.wait()

        holder = asyncio.create_task(store.write(hold))
        await asyncio.sleep(0.05)
        job = asyncio.create_task(store.write(lambda db: _note(order, "job"), background=True))
        await asyncio.sleep(0.05)
        chat = asyncio.create_task(store._hot(lambda db: _note(order, "chat")))
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(holder, job, chat)
        assert order == ["held", "chat", "job"]
    finally:
        await store.close()


async def _note(order: list[str], what: str) -> None:
    order.append(what)
