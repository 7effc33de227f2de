"""A burst of due jobs stays cheap: claimed runs wait in a queue for `max_parallel` workers
(rows claimed in the store, not one task each) with their leases renewed, a "run now" goes
ahead of the queue, a batch of claims is one log line, and planning a thousand jobs of one
cron expression parses it once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from hermes_gateway.config.schema import SchedulerConfig
from hermes_gateway.core.job_turns import JobAnswer, JobTurn, TurnOutcome
from hermes_gateway.scheduler import schedule as schedule_module
from hermes_gateway.scheduler.jobs import Job, Origin, new_job, plan
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import parse
from hermes_gateway.scheduler.scheduler import Scheduler
from hermes_gateway.store.store import Store
from tests.scheduler.test_ticker import T0, Clock

ORIGIN = Origin("telegram", "dm", "555", None, "555")


class Gate:
    """Job turns that wait until the test opens the gate; records the order they ran in."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.ran: list[str] = []

    async def run_job(self, turn: JobTurn) -> TurnOutcome:
        self.ran.append(turn.session_key.removeprefix("cron:"))
        await self.open.wait()
        return TurnOutcome("succeeded", "[SILENT]")

    async def deliver_job(self, answer: JobAnswer) -> str:
        return "skipped"  # nothing is delivered

    def stop_jobs(self) -> None:
        pass


def hourly(i: int) -> Job:
    return new_job(
        name=f"j{i}", prompt="p", schedule=parse("0 * * * *", "UTC", T0), origin=ORIGIN, now=T0
    )


async def test_a_burst_waits_in_a_queue_for_the_workers_not_as_tasks(tmp_path: Path) -> None:
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        clock, gate = Clock(T0), Gate()
        config = SchedulerConfig(enabled=True, max_parallel=3)
        ledger = Ledger(store, "host:1:t", config.lease_s)
        sched = Scheduler(lambda: config, ledger, gate, workers=8, clock=clock)
        jobs = [hourly(i) for i in range(30)]
        for job in jobs:
            await ledger.add(job, T0)
        clock.now = T0 + 3600
        with capture_logs() as logs:
            await sched.tick()
            await asyncio.sleep(0.2)
        assert len(sched._tasks) == 3 and sched.running == 3  # the workers, nothing more
        assert sched.status()["queued"] == 27
        claimed = [e for e in logs if e["event"] == "job.claimed"]
        assert len(claimed) == 2 and sum(e["count"] for e in claimed) == 30  # 25 + 5
        assert sorted(i for e in claimed for i in e["job_ids"]) == sorted(j.id for j in jobs)
        # the queued runs are claimed in the store, and their leases renewed
        assert await ledger.heartbeat(list(sched._live), clock.now + 1) == 30
        urgent = hourly(99)
        await ledger.add(urgent, T0)
        assert await sched.run_now(urgent) is not None  # ahead of the 27 queued
        gate.open.set()

        async def all_ran() -> None:
            while len(gate.ran) < 31:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(all_ran(), 60)
        assert gate.ran[3] == urgent.id
        await asyncio.gather(*sched._tasks)
        runs = await ledger.runs(limit=100)
        assert len(runs) == 31 and {r.status for r in runs} == {"succeeded"}
        assert sched._live == {} and sched._tasks == set()
    finally:
        await store.close()


def test_planning_a_burst_of_one_expression_parses_it_once(monkeypatch: Any) -> None:
    made: list[str] = []

    class Counted(schedule_module.croniter):  # type: ignore[misc,name-defined]
        def __init__(self, expr: str, *args: Any, **kwargs: Any) -> None:
            made.append(expr)
            super().__init__(expr, *args, **kwargs)

    monkeypatch.setattr(schedule_module, "croniter", Counted)
    schedule_module._parsed.cache_clear()
    expr = "17 3 * * 2"  # an expression no other test uses: nothing of it cached
    s = parse(expr, "Europe/Berlin", T0)
    made.clear()
    jobs = [
        new_job(name=f"j{i}", prompt="p", schedule=s, origin=ORIGIN, now=T0) for i in range(1000)
    ]
    now = (jobs[0].next_run_at or 0) + 5
    plans = [plan(j, now, 3600) for j in jobs]
    assert {p.slot for p in plans if p is not None} == {jobs[0].next_run_at}
    assert len(made) <= 1  # parsed once at most; every later slot from a copy or remembered


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York"])
def test_slots_from_the_parsed_copy_match_a_fresh_croniter_across_dst(zone: str) -> None:
    """The parsed expression is shared: iterating one copy must not change what the next
    computes (interleaved questions across a DST change give the answers fresh ones do)."""
    zi = schedule_module.zone_of(zone)
    times = [1_774_400_000.0 + k * 1_800 for k in range(0, 400, 7)]  # around late March 2026
    exprs = ["30 2 * * *", "*/20 * * * *", "0 1 * * 0"]
    for t in times:
        for expr in exprs:
            got = (schedule_module._cron_next(expr, zi, t), schedule_module._cron_prev(expr, zi, t))
            schedule_module._parsed.cache_clear()  # a fresh parse for the reference
            fresh = (
                schedule_module._cron_next.__wrapped__(expr, zi, t),
                schedule_module._cron_prev.__wrapped__(expr, zi, t),
            )
            assert got == fresh, (expr, t)


async def test_a_stop_abandons_the_queued_runs_with_the_running_ones(tmp_path: Path) -> None:
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        clock, gate = Clock(T0), Gate()
        config = SchedulerConfig(enabled=True, max_parallel=2)
        ledger = Ledger(store, "host:1:t", config.lease_s)
        sched = Scheduler(lambda: config, ledger, gate, workers=8, clock=clock)
        for i in range(10):
            await ledger.add(hourly(i), T0)
        clock.now = T0 + 3600
        await sched.tick()
        await asyncio.sleep(0.2)
        assert sched.running == 2 and sched.status()["queued"] == 8
        await sched.stop()
        runs = await ledger.runs(limit=100)
        assert len(runs) == 10 and {(r.status, r.delivery) for r in runs} == {
            ("abandoned", "skipped")
        }
        assert len(gate.ran) == 2  # the queued ones never started
    finally:
        await store.close()
