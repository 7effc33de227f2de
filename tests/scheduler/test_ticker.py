"""The ticker against a clock the test moves: 5 missed hourly slots give one catch-up run (or
none with `catch_up: skip`), a second tick finds nothing, a job's own turn is given its slot,
and a ticker that stopped ticking shows in `stalled`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from hermes_gateway.config.schema import SchedulerConfig
from hermes_gateway.core.job_turns import JobAnswer, JobTurn, TurnOutcome
from hermes_gateway.scheduler.jobs import Origin, new_job
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import parse
from hermes_gateway.scheduler.scheduler import Scheduler
from hermes_gateway.store.store import Store

T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Turns:
    """Stands in for the agent turn: records which slots it was asked to run."""

    def __init__(self) -> None:
        self.slots: list[int] = []

    async def run_job(self, turn: JobTurn) -> TurnOutcome:
        self.slots.append(turn.slot)
        return TurnOutcome("succeeded", "[SILENT]")

    async def deliver_job(self, answer: JobAnswer) -> str:
        return "skipped"  # nothing is delivered

    def stop_jobs(self) -> None:
        pass


def ticker(store: Store, clock: Clock, turns: Turns, catch_up: str = "one") -> Scheduler:
    config = SchedulerConfig(enabled=True, catch_up=catch_up)  # type: ignore[arg-type]
    ledger = Ledger(store, "host:1:t", config.lease_s)
    return Scheduler(lambda: config, ledger, turns, workers=4, clock=clock)


@pytest.mark.parametrize(("policy", "expected"), [("one", 1), ("skip", 0)])
async def test_five_missed_hourly_slots_after_downtime(
    tmp_path: Path, policy: str, expected: int
) -> None:
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        clock, turns = Clock(T0), Turns()
        sched = ticker(store, clock, turns, policy)
        origin = Origin("telegram", "dm", "555", None, "555")
        job = new_job(
            name="h", prompt="p", schedule=parse("0 * * * *", "UTC", T0), origin=origin, now=T0,
            catch_up=policy,  # type: ignore[arg-type]
        )  # fmt: skip
        await sched.ledger.add(job, T0)
        clock.now = T0 + 5 * 3600 + 40 * 60  # the gateway was down over 5 slots
        await sched.tick()
        await asyncio.gather(*sched._tasks)
        await sched.tick()  # nothing more is due
        await asyncio.gather(*sched._tasks)
        assert turns.slots == [int(T0) + 5 * 3600] * expected
        [run] = await sched.ledger.runs(job.id)
        assert run.kind == ("catch_up" if policy == "one" else "skipped")
        assert sched.outcomes[("succeeded" if policy == "one" else "skipped")] == 1
        moved = await sched.ledger.get(job.id)
        assert moved is not None and moved.next_run_at == int(T0) + 6 * 3600
    finally:
        await store.close()


def test_a_ticker_that_stopped_ticking_is_stalled() -> None:
    sched = Scheduler.__new__(Scheduler)
    sched._config = lambda: SchedulerConfig(enabled=True, tick_s=5)
    sched.last_tick = time.monotonic()
    assert sched.stalled() is None
    sched.last_tick = time.monotonic() - 31
    assert (sched.stalled() or "").startswith("scheduler: no tick for 3")


def test_jobs_always_leave_a_pool_thread_to_chats() -> None:
    config = SchedulerConfig(enabled=True, max_parallel=8)
    assert Scheduler(lambda: config, None, None, workers=4).parallel == 3  # type: ignore[arg-type]
    assert Scheduler(lambda: config, None, None, workers=64).parallel == 8  # type: ignore[arg-type]
