"""A job's answer goes out through the runner's delivery: taken up after a crash cut a part's
send short, it resumes at that part with the part in doubt handed to the adapter to check
first; a platform that refuses it is offered it again after `Delivery`'s pauses, and the run
records `failed` only once those are spent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.config.schema import RunnerConfig, SchedulerConfig
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.pool import AgentPool
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.errors import TransientAdapterError
from hermes_gateway.events import OutboundMessage
from hermes_gateway.metrics import Metrics
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.scheduler import Scheduler
from hermes_gateway.store.store import Store
from tests.hermes_gateway.core.test_parts import SplittingAdapter
from tests.scheduler.test_outbox import answered_run
from tests.scheduler.test_ticker import Clock


class DoubtingAdapter(SplittingAdapter):
    """Splits as the real ones do, and keeps the part in doubt each send was given."""

    def __init__(self, failures: dict[int, list[Exception]] | None = None) -> None:
        super().__init__(failures)
        self.doubts: list[str | None] = []

    async def send(self, out: OutboundMessage) -> None:
        self.doubts.append(out.doubt)
        await super().send(out)


def scheduler(store: Store, ledger: Ledger, adapter: SplittingAdapter, clock: Clock) -> Scheduler:
    """The scheduler handing its work to a real runner, whose delivery has one platform."""
    adapters = {"telegram": adapter}
    bus, metrics = EventBus(timeout=1), Metrics()
    delivery = Delivery(adapters, store, bus, metrics)  # type: ignore[arg-type]
    runner = GatewayRunner(
        RunnerConfig(),
        store=store,
        bus=bus,
        pool=AgentPool(2),
        agents=AgentCache(lambda key: None, store.history, max_size=1, idle_ttl_s=60),  # type: ignore[arg-type,return-value]
        delivery=delivery,
        metrics=metrics,
        job_ledger=ledger,
    )
    config = SchedulerConfig(enabled=True)
    return Scheduler(lambda: config, ledger, runner, workers=4, clock=clock)


async def test_a_delivery_cut_short_by_a_crash_resumes_with_its_part_in_doubt(
    tmp_path: Path,
) -> None:
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        crashed = Ledger(store, "crashed", 60)
        run_id, finished = await answered_run(crashed)
        # the first part went out; the second's send began after it, then the process died
        await crashed.delivered(run_id, "pending", 1)
        assert await crashed.intent(run_id, 1, "ref-1")
        adapter = DoubtingAdapter()
        sched = scheduler(store, Ledger(store, "next", 60), adapter, Clock(finished + 120))
        await sched.tick()  # the lease lapsed: this gateway takes the delivery over
        await asyncio.gather(*sched._tasks)
        assert adapter.skips == [1] and adapter.doubts == ["ref-1"]
        assert adapter.send_part.sent == ["two", "three"]  # never "one" again
        [run] = await sched.ledger.runs()
        assert (run.delivery, run.parts_sent) == ("delivered", 2)
        assert sched.status()["deliveries"] == {"delivered": 1}
    finally:
        await store.close()


@pytest.mark.parametrize(("refusals", "final"), [(2, "delivered"), (3, "failed")])
async def test_a_refused_answer_is_offered_again_then_recorded_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusals: int, final: str
) -> None:
    monkeypatch.setattr(Delivery, "redeliver_delays", (0.01, 0.01))  # 3 attempts in all
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        crashed = Ledger(store, "crashed", 60)
        run_id, finished = await answered_run(crashed)
        down = [TransientAdapterError("502") for _ in range(refusals)]
        adapter = DoubtingAdapter({0: down})
        sched = scheduler(store, Ledger(store, "next", 60), adapter, Clock(finished + 120))
        await sched.tick()
        await asyncio.gather(*sched._tasks)
        assert len(adapter.skips) == min(refusals + 1, 3)
        [run] = await sched.ledger.runs()
        assert run.delivery == final
        assert sched.status()["deliveries"] == {final: 1}
    finally:
        await store.close()
