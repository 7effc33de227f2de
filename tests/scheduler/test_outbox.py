"""A job's answer in several parts records each part's intent on its run: a delivery that lost
its run to another gateway (its lease lapsed while it was paused, and the answer was adopted)
sends no further part and records nothing; the adopter sends the rest."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.job_settle import JobSettle
from hermes_gateway.metrics import Metrics
from hermes_gateway.scheduler.job_turn import answer_of
from hermes_gateway.scheduler.jobs import plan
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.store.store import Store
from tests.hermes_gateway.core.test_parts import SplittingAdapter
from tests.scheduler.test_ledger import T0, hourly

ANSWER = "one\n\ntwo\n\nthree"


async def answered_run(ledger: Ledger) -> tuple[int, float]:
    """A job whose run succeeded with a three-part answer still to deliver: (run id, time)."""
    job = hourly()
    await ledger.add(job, T0)
    now = T0 + 3600
    [due] = await ledger.due(now)
    p = plan(due, now, 3600)
    assert p is not None
    run_id = await ledger.claim(due, p, now)
    assert run_id is not None and await ledger.start(run_id, now)
    assert await ledger.finish(run_id, "succeeded", now + 1, ANSWER, None, "pending")
    return run_id, now + 1


async def test_a_delivery_adopted_elsewhere_sends_no_further_part(tmp_path: Path) -> None:
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        paused, adopter = Ledger(store, "paused", 60), Ledger(store, "adopter", 60)
        run_id, finished = await answered_run(paused)
        job = await paused.get((await paused.runs())[0].job_id)
        assert job is not None
        adapter, sent = SplittingAdapter(), []

        async def then_adopted(index: int, part: str) -> None:
            sent.append(part)
            if index == 0:  # paused past its lease here; another gateway adopts the answer
                [left] = await adopter.adopt_undelivered(finished + 120)
                assert left.id == run_id

        adapter.send_part = then_adopted  # type: ignore[assignment]
        delivery = Delivery({"telegram": adapter}, store, EventBus(timeout=1), Metrics())
        agents = AgentCache(lambda key: None, store.history, max_size=1, idle_ttl_s=60)  # type: ignore[arg-type,return-value]
        outbox = JobSettle(store, delivery, agents, paused)  # the runner's delivery of jobs
        answer = answer_of(job, run_id, ANSWER, "reply", per_user=True)
        assert await outbox.deliver(answer) == "taken"
        assert sent == ["one"]  # not "two" and "three" as well: the adopter sends those
        [run] = await adopter.runs()
        assert (run.delivery, run.parts_sent) == ("pending", 1)  # not recorded failed
        assert outbox.outcomes == {}
    finally:
        await store.close()
