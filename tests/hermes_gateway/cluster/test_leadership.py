"""Singleton work through leader leases, on the in-process hub and on Redis alike: one leader,
a stand-by that takes over when the leader releases or dies, a lost lease noticed, work bounded
by the lease; and the survey `/status` shows (instances, leaders, session counts, ages)."""

from __future__ import annotations

import asyncio
import math

from hermes_gateway.cluster.leadership import ClusterLeader, SoleLeader
from hermes_gateway.cluster.lease import Lease
from hermes_gateway.errors import CoordinationUnavailable
from tests.hermes_gateway.cluster.conftest import Make

ROLE = "telegram-poller:123"
LEASE_S = 1.0


async def test_one_leader_and_a_stand_by_that_takes_over_on_release(make: Make) -> None:
    a = ClusterLeader(await make("a", LEASE_S), ROLE)
    b = ClusterLeader(await make("b", LEASE_S), ROLE)
    await a.acquire()
    waiting = asyncio.create_task(b.acquire())
    await asyncio.sleep(LEASE_S * 2.5)  # a renews meanwhile: b keeps waiting
    assert a.leading and not waiting.done() and not b.leading
    assert 0 < a.remaining() < LEASE_S
    await a.release()
    await asyncio.wait_for(waiting, LEASE_S * 2)  # released: b leads within a retry
    assert b.leading and not a.leading and a.remaining() == 0
    assert await b.coordinator.leader(ROLE) == "b"
    await b.release()


async def test_a_dead_leaders_lease_runs_out_and_is_taken(make: Make) -> None:
    a_coordinator = await make("a", LEASE_S)
    a = ClusterLeader(a_coordinator, ROLE)
    b = ClusterLeader(await make("b", LEASE_S), ROLE)
    await a.acquire()
    assert a._keeper is not None
    a._keeper.cancel()  # a stops renewing, as a killed process does
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(b.acquire(), LEASE_S * 3)
    assert loop.time() - started <= LEASE_S + b.retry_s + 0.5
    assert a.remaining() == 0  # its own deadline passed: it would not poll any more
    await b.release()


async def test_a_refused_renewal_is_reported_lost(make: Make) -> None:
    coordinator = await make("a", LEASE_S)
    a = ClusterLeader(coordinator, ROLE)
    await a.acquire()
    assert a.lease is not None
    await coordinator.release(a.lease)  # gone from the store (Redis lost its data)
    await asyncio.wait_for(a.lost(), LEASE_S * 2)
    assert not a.leading and a.remaining() == 0
    await a.release()


async def test_a_renewal_that_cannot_reach_the_store_is_tried_again_soon(make: Make) -> None:
    """Three renewals in a row fail (the store did not answer): each is tried again after
    `renew_retry_s`, not a third of the lease later, so the fourth keeps the lease."""
    coordinator = await make("a", LEASE_S)
    renew, failures = coordinator.renew, [3]

    async def flaky(lease: Lease) -> Lease | None:
        if failures[0] > 0:
            failures[0] -= 1
            raise CoordinationUnavailable("the store did not answer (the test)")
        return await renew(lease)

    coordinator.renew = flaky  # type: ignore[method-assign]
    a = ClusterLeader(coordinator, ROLE)
    await a.acquire()
    await asyncio.sleep(LEASE_S * 2)
    assert failures == [0] and a.leading and not a._lost.is_set()
    await a.release()


async def test_the_survey_shows_instances_leaders_and_session_counts(make: Make) -> None:
    a, b = await make("a", LEASE_S * 5), await make("b", LEASE_S * 5)
    await a.beat()
    await b.beat()
    assert await a.lead(ROLE) is not None
    for key in ("telegram:dm:1", "telegram:dm:2"):
        assert await a.acquire(key) is not None
    assert await b.acquire("telegram:dm:3") is not None
    await asyncio.sleep(0.3)
    view = (await b.survey()).as_dict()
    assert set(view["instances"]) == {"a", "b"}
    assert view["instances"]["a"]["sessions"] == 2 and view["instances"]["b"]["sessions"] == 1
    assert 0.2 <= view["instances"]["a"]["heartbeat_s"] < 3
    leader = view["leaders"][ROLE]
    assert leader["owner"] == "a" and 0.2 <= leader["age_s"] < 3
    assert 0 < leader["left_s"] <= LEASE_S * 5


async def test_a_single_process_always_leads() -> None:
    sole = SoleLeader(ROLE)
    await sole.acquire()
    assert sole.leading and sole.remaining() == math.inf
    lost = asyncio.create_task(sole.lost())
    await asyncio.sleep(0.05)
    assert not lost.done()
    lost.cancel()


async def test_numbered_slots_let_at_most_that_many_lead_and_a_freed_one_is_taken(
    make: Make,
) -> None:
    """Slack's 10 Socket Mode connections per app: 11 instances ask for one of 10 slots, 10
    get one (each a different lease), the 11th waits and takes the one freed."""
    leaders = [
        ClusterLeader(await make(f"i{n}", LEASE_S), "slack:A1:socket", slots=10) for n in range(11)
    ]
    asking = [asyncio.create_task(leader.acquire()) for leader in leaders]
    await asyncio.sleep(LEASE_S * 2)  # every one asked several times; renewals went on
    waiting = [leader for leader, task in zip(leaders, asking, strict=True) if not task.done()]
    held = sorted(leader.lease.key for leader in leaders if leader.lease is not None)
    assert len(waiting) == 1 and not waiting[0].leading
    assert held == sorted(f"slack:A1:socket:{n}" for n in range(10))
    freed = next(leader for leader in leaders if leader.leading)
    assert freed.lease is not None
    slot = freed.lease.key
    await freed.release()
    await asyncio.wait_for(asking[leaders.index(waiting[0])], LEASE_S * 2)
    assert waiting[0].lease is not None and waiting[0].lease.key == slot
    assert waiting[0].status()["lease"] == slot
    for leader in leaders:
        await leader.release()
