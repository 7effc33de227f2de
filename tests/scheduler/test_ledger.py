"""The run ledger on SQLite and PostgreSQL: a slot is claimed once (a second claimer, or a
second scheduler on the same database, gets nothing), an expired lease leaves the run
`abandoned`, and slots missed while nothing ran collapse into one catch-up run or are skipped."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_gateway.scheduler.jobs import CatchUp, Job, Origin, new_job, plan
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import parse
from hermes_gateway.store.store import Store
from tests.integration.test_postgres import SERVER


@contextlib.asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    """A database of its own on the test server, dropped afterwards."""
    import asyncpg

    user, _, rest = SERVER.partition("@")
    host = rest.split("host=", 1)[1]
    name = f"hermes_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(user=user, host=host, database="postgres")
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql+asyncpg://{user}@/{name}?host={host}"
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()


T0 = 1_800_000_000.0  # a Friday, 2027-01-15 08:00 UTC
CHAT = Origin("telegram", "dm", "555", None, "555")


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"
        return
    if not SERVER:
        pytest.skip("set HERMES_TEST_POSTGRES (CI does)")
    async with postgres_database() as pg:
        yield pg


@pytest.fixture
async def stores(url: str) -> AsyncIterator[list[Store]]:
    """Two stores on one database: two gateway processes."""
    opened = [Store(url), Store(url)]
    for s in opened:
        await s.open()
    yield opened
    for s in opened:
        await s.close()


def hourly(catch_up: CatchUp = "one", now: float = T0) -> Job:
    schedule = parse("0 * * * *", "Europe/Berlin", now)
    return new_job(
        name="feeds", prompt="p", schedule=schedule, origin=CHAT, now=now, catch_up=catch_up
    )


async def test_a_slot_is_claimed_once(stores: list[Store]) -> None:
    first, second = Ledger(stores[0], "a", 60), Ledger(stores[1], "b", 60)
    job = hourly()
    await first.add(job, T0)
    assert job.next_run_at == T0 + 3600
    now = T0 + 3600 + 5
    [due] = await first.due(now)
    p = plan(due, now, 3600)
    assert p is not None and (p.action, p.slot, p.kind) == ("run", T0 + 3600, "scheduled")
    run_id = await first.claim(due, p, now)
    assert run_id is not None
    assert await second.claim(due, p, now) is None  # same job state read: the CAS fails
    assert await second.due(now) == []  # the job moved on to its next slot
    moved = await second.get(job.id)
    assert moved is not None and moved.next_run_at == T0 + 7200 and moved.runs == 1
    # "run now" while it runs: refused, the job never overlaps itself
    assert await second.claim_now(moved, now + 1) is None
    [rec] = await second.runs(job.id)
    assert (rec.status, rec.scheduled_for, rec.delivery) == ("claimed", T0 + 3600, "pending")


async def test_an_expired_lease_is_abandoned_and_never_stays_running(stores: list[Store]) -> None:
    dead, alive = Ledger(stores[0], "dead", 60), Ledger(stores[1], "alive", 60)
    job = hourly()
    await dead.add(job, T0)
    now = T0 + 3600
    [due] = await dead.due(now)
    p = plan(due, now, 3600)
    assert p is not None
    run_id = await dead.claim(due, p, now)
    assert run_id is not None and await dead.start(run_id, now)
    assert await alive.reap(now + 30) == []  # within its lease
    assert await dead.heartbeat([run_id], now + 50) == 1  # renewed to now + 110
    assert await alive.reap(now + 100) == []
    [gone] = await alive.reap(now + 111)  # no heartbeat since: its process died
    assert gone.id == run_id
    [rec] = await alive.runs(job.id)
    assert (rec.status, rec.delivery) == ("abandoned", "skipped")
    # the dead owner cannot finish it later, and the next slot is claimable
    assert not await dead.finish(run_id, "succeeded", now + 120, "late", None, "pending")
    later = T0 + 7200
    [due] = await alive.due(later)
    p = plan(due, later, 3600)
    assert p is not None and await alive.claim(due, p, later) is not None


async def test_a_delivery_cut_short_leaves_the_part_being_sent_in_doubt(
    stores: list[Store],
) -> None:
    dead, alive = Ledger(stores[0], "dead", 60), Ledger(stores[1], "alive", 60)
    job = hourly()
    await dead.add(job, T0)
    now = T0 + 3600
    [due] = await dead.due(now)
    p = plan(due, now, 3600)
    assert p is not None
    run_id = await dead.claim(due, p, now)
    assert run_id is not None and await dead.start(run_id, now)
    assert await dead.finish(run_id, "succeeded", now + 1, "one\n\ntwo", None, "pending")

    async def doubt() -> tuple[int, str | None]:
        [rec] = await alive.runs(job.id)
        return rec.parts_sent, rec.doubt

    assert await doubt() == (0, None)  # no send began
    await dead.intent(run_id, 0, "")
    assert await doubt() == (0, "")  # part 1 may be out, after nothing known
    await dead.delivered(run_id, "pending", 1)
    assert await doubt() == (1, None)  # part 1 out, part 2 not begun
    assert await dead.intent(run_id, 1, "77")
    [left] = await alive.adopt_undelivered(now + 100)  # the deliverer died there
    assert (left.id, left.parts_sent, left.doubt) == (run_id, 1, "77")
    assert not await dead.intent(run_id, 2, "78")  # not its run any more: nothing written
    assert await doubt() == (1, "77")
    assert await alive.intent(run_id, 1, "")


@pytest.mark.parametrize(
    ("policy", "runs", "status"), [("one", 1, "claimed"), ("skip", 0, "skipped")]
)
async def test_five_missed_hourly_slots_collapse_or_are_skipped(
    stores: list[Store], policy: CatchUp, runs: int, status: str
) -> None:
    ledger = Ledger(stores[0], "a", 60)
    job = hourly(policy)
    await ledger.add(job, T0)
    # down from before the first slot until 40 min past the fifth: past its 30 min grace
    now = T0 + 5 * 3600 + 40 * 60
    [due] = await ledger.due(now)
    p = plan(due, now, 3600)
    assert p is not None
    assert await ledger.claim(due, p, now) is not None
    assert await ledger.due(now) == []
    [rec] = await ledger.runs(job.id)
    assert (rec.status, rec.scheduled_for) == (status, T0 + 5 * 3600)
    assert (rec.kind, rec.missed) == (("catch_up", 4) if policy == "one" else ("skipped", 5))
    after = await ledger.get(job.id)
    assert after is not None and after.next_run_at == T0 + 6 * 3600 and after.runs == runs


async def test_within_the_grace_a_late_slot_runs_and_a_late_one_shot_is_missed(
    stores: list[Store],
) -> None:
    ledger = Ledger(stores[0], "a", 60)
    job = hourly()
    await ledger.add(job, T0)
    now = T0 + 3600 + 20 * 60  # 20 min late: within half the period
    [due] = await ledger.due(now)
    p = plan(due, now, 3600)
    assert p is not None and (p.action, p.kind, p.missed) == ("run", "late", 0)
    once = new_job(
        name="call", prompt="p", schedule=parse("in 20m", "UTC", T0), origin=CHAT, now=T0
    )
    await ledger.add(once, T0)
    way_late = T0 + 1200 + 3601
    [due_once] = [j for j in await ledger.due(way_late) if j.id == once.id]
    p = plan(due_once, way_late, 3600)
    assert p is not None and p.action == "missed"
    assert await ledger.claim(due_once, p, way_late) is not None
    gone = await ledger.get(once.id)
    assert gone is not None and (gone.state, gone.next_run_at) == ("missed", None)
    [rec] = await ledger.runs(once.id)
    assert (rec.status, rec.delivery) == ("missed", "skipped")


async def test_two_schedulers_on_one_database_claim_each_slot_exactly_once(
    stores: list[Store],
) -> None:
    ledgers = [Ledger(stores[0], "a", 600), Ledger(stores[1], "b", 600)]
    jobs = [hourly() for _ in range(8)]
    for job in jobs:
        await ledgers[0].add(job, T0)

    async def tick(ledger: Ledger, now: float) -> None:
        for job in await ledger.due(now):
            p = plan(job, now, 3600)
            if p is not None and (run_id := await ledger.claim(job, p, now)) is not None:
                await ledger.start(run_id, now)
                await ledger.finish(run_id, "succeeded", now, "ok", None, "delivered")

    for hour in range(1, 5):
        now = T0 + hour * 3600 + 1
        await asyncio.gather(*(tick(ledger, now) for ledger in ledgers for _ in range(2)))
    slots = Counter(
        (r.job_id, r.scheduled_for)
        for r in await ledgers[0].runs(limit=1000)
        if r.status != "skipped"
    )
    assert len(slots) == 8 * 4 and set(slots.values()) == {1}


async def test_what_a_dead_process_of_this_host_held_is_freed_at_start(
    stores: list[Store],
) -> None:
    dead = Ledger(stores[0], "box:4242:aa", 600)
    other_host = Ledger(stores[0], "elsewhere:4242:bb", 600)
    fresh = Ledger(stores[1], "box:7:cc", 600)
    ids = []
    for ledger in (dead, other_host):
        job = hourly()
        await ledger.add(job, T0)
        [due] = [j for j in await ledger.due(T0 + 3600) if j.id == job.id]
        p = plan(due, T0 + 3600, 3600)
        assert p is not None
        run_id = await ledger.claim(due, p, T0 + 3600)
        assert run_id is not None and await ledger.start(run_id, T0 + 3600)
        ids.append(run_id)
    now = T0 + 3601  # long before the 600 s leases lapse
    assert await fresh.take_back("box", lambda pid: pid != 4242, now) == 1
    [gone] = await fresh.reap(now)
    assert gone.id == ids[0]  # the other host's run keeps its lease: its process may live


async def test_a_slot_a_run_now_already_took_is_passed_over_not_stuck(
    stores: list[Store],
) -> None:
    ledger = Ledger(stores[0], "a", 60)
    first, second = hourly(), hourly()
    for job in (first, second):
        await ledger.add(job, T0)
    slot = T0 + 3600
    manual = await ledger.claim_now(first, slot)  # "run now" at the very second of the slot
    assert manual is not None and await ledger.start(manual, slot)
    assert await ledger.finish(manual, "succeeded", slot, "ok", None, "delivered")
    due = await ledger.due(slot)
    plans = [(j, p) for j in due if (p := plan(j, slot, 3600)) is not None]
    got = dict(zip([j.id for j, _ in plans], await ledger.claim_batch(plans, slot), strict=True))
    assert got[first.id] is None and got[second.id] is not None
    assert await ledger.due(slot) == []  # the first job moved on too: not stuck at that slot
