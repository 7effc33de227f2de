"""Intake parts (Discord shards) split over a cluster: the fair-share arithmetic, and instances
on the in-process hub and on Redis that split the parts evenly, hand one over to an instance
that joins, and take a dead instance's parts once its leases run out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from hermes_gateway.cluster.leadership import ClusterLeader
from hermes_gateway.cluster.lease import Coordinator
from hermes_gateway.cluster.shares import MEMBER, ClusterShares, SoleShares, fair_share, plan
from tests.hermes_gateway.cluster.conftest import Make

ROLE = "discord:1000:shard"
LEASE_S = 1.0


@pytest.mark.parametrize(
    ("count", "instances", "share"),
    [(1, 1, 1), (2, 1, 2), (2, 2, 1), (3, 2, 2), (4, 3, 2), (2, 3, 1), (10, 4, 3), (5, 0, 5)],
)
def test_fair_share_is_the_ceiling(count: int, instances: int, share: int) -> None:
    assert fair_share(count, instances) == share


def test_alone_an_instance_takes_every_part() -> None:
    assert plan(3, "a", [], {}, ["a"]).take == (0, 1, 2)


def test_below_the_share_only_free_parts_are_taken_up_to_it() -> None:
    moves = plan(4, "a", [], {1: "b"}, ["a", "b"])
    assert moves.take == (0, 2) and moves.give == ()


def test_at_the_share_a_free_part_waits_one_round_for_an_instance_below_it() -> None:
    # b is dead but still looks alive: part 1 is free; a holds its share already
    assert plan(2, "a", [0], {0: "a"}, ["a", "b"]).take == ()
    assert plan(2, "a", [0], {0: "a"}, ["a", "b"], orphans=[1]).take == (1,)


def test_above_the_share_one_part_goes_back_when_someone_is_below_it() -> None:
    owners = {0: "a", 1: "a", 2: "a"}
    assert plan(3, "a", [0, 1, 2], owners, ["a", "b"]).give == (2,)
    owners = {0: "a", 1: "a", 2: "a", 3: "b"}
    assert plan(4, "a", [0, 1, 2], owners, ["a", "b"]).give == (2,)


def test_above_the_share_nothing_goes_back_when_nobody_would_take_it() -> None:
    # the other instance is at its share (3 parts, 2 instances: 2 and 1 is even enough)
    assert plan(3, "a", [0, 1], {0: "a", 1: "a", 2: "b"}, ["a", "b"]).give == ()
    # the instance below the share is dead (no recent heartbeat): a keeps both
    assert plan(2, "a", [0, 1], {0: "a", 1: "a"}, ["a"]).give == ()


def test_a_part_another_instance_holds_is_never_taken() -> None:
    assert plan(2, "a", [], {0: "b", 1: "c"}, ["a"], orphans=[0, 1]).take == ()


async def test_one_process_holds_every_part_for_good() -> None:
    shares = SoleShares(3)
    await shares.start()
    assert shares.everything and shares.held == {0, 1, 2}
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(shares.changed(), 0.05)


@contextlib.asynccontextmanager
async def instance(coordinator: Coordinator, count: int) -> AsyncIterator[ClusterShares]:
    """Shares of ``count`` parts on ``coordinator``, with the heartbeat the gateway keeps."""

    async def beat() -> None:
        while True:
            await coordinator.beat()
            await asyncio.sleep(coordinator.lease_s / 3)

    beating = asyncio.create_task(beat())
    shares = ClusterShares(coordinator, ROLE, count, lambda role: ClusterLeader(coordinator, role))
    await shares.start()
    try:
        yield shares
    finally:
        beating.cancel()
        await shares.release()


async def until(check: object, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():  # type: ignore[operator]
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_joining_instance_gets_its_share_and_a_dead_ones_is_taken(make: Make) -> None:
    a_coordinator = await make("a", LEASE_S)
    b_coordinator = await make("b", LEASE_S)
    async with instance(a_coordinator, 2) as a:
        await until(lambda: a.held == {0, 1}, 5)  # alone: both
        async with instance(b_coordinator, 2) as b:
            # a hands one over; while b connects a still serves it (the hand-over)
            await until(lambda: len(b.held) == 1, 10)
            await until(lambda: len(a.held) == 1, 10)
            assert a.held | b.held == {0, 1}
            survey = await a_coordinator.survey()
            parts = [h for h in survey.leases if h.kind == "leader" and MEMBER not in h.key]
            assert sorted(h.owner for h in parts) == ["a", "b"]
            # b dies: its leases stop being renewed
            dead = set(b.held)
            for task in [*b._tasks, *b._watchers.values()]:
                task.cancel()
            for leader in b.leaders.values():
                if leader._keeper is not None:
                    leader._keeper.cancel()
            loop = asyncio.get_running_loop()
            started = loop.time()
            await until(lambda: a.held == {0, 1}, 10)
            took = loop.time() - started
            assert a._leading == {0, 1} and dead <= a.held
            # the lease runs out, then at most two rounds (b still looked alive)
            assert took < LEASE_S + 3 * a.round_s + 1, took


async def test_a_part_whose_lease_was_lost_is_served_until_another_instance_holds_it(
    make: Make,
) -> None:
    coordinator, other = await make("a", LEASE_S), await make("b", LEASE_S)
    async with instance(coordinator, 1) as a:
        await until(lambda: a._leading == {0}, 5)
        lease = a.leaders[0].lease
        assert lease is not None
        served: list[bool] = []

        async def sample() -> None:
            while True:
                served.append(a.held == {0})
                await asyncio.sleep(0.005)

        sampler = asyncio.create_task(sample())
        await coordinator.release(lease)  # gone behind its back (a renewal it could not make)

        def retaken() -> bool:
            again = a.leaders[0].lease
            return a.leaders[0].leading and again is not None and again.token != lease.token

        await until(retaken, LEASE_S * 3)  # lost, then taken back: nobody else held it
        sampler.cancel()
        assert served and all(served)  # served all along
        lease = a.leaders[0].lease
        assert lease is not None
        await coordinator.release(lease)
        taken = await other.lead(f"{ROLE}:0")  # this time another instance takes it
        assert taken is not None
        await until(lambda: a.held == frozenset(), LEASE_S * 3)
        await other.release(taken)


async def test_an_instance_that_does_not_serve_the_role_is_handed_no_part(make: Make) -> None:
    """Alive (it beats) but without the platform: the holder keeps every part, rather than
    giving one back now and then to an instance that will never connect it."""
    a_coordinator, b_coordinator = await make("a", LEASE_S), await make("b", LEASE_S)

    async def beat() -> None:
        while True:
            await b_coordinator.beat()
            await asyncio.sleep(LEASE_S / 3)

    beating = asyncio.create_task(beat())
    try:
        async with instance(a_coordinator, 2) as a:
            await until(lambda: a.held == {0, 1}, 5)
            survey = await a_coordinator.survey()
            assert "b" in survey.instances  # b counts as alive...
            tokens = {n: leader.lease and leader.lease.token for n, leader in a.leaders.items()}
            leading: list[frozenset[int]] = []
            for _ in range(int(2 * (LEASE_S + a.handover_s) / 0.05)):
                leading.append(frozenset(a._leading))
                await asyncio.sleep(0.05)
            # ...yet nothing was given to it: each part's lease held all along, never retaken
            assert set(leading) == {frozenset({0, 1})}
            assert {n: leader.lease and leader.lease.token for n, leader in a.leaders.items()} == (
                tokens
            )
    finally:
        beating.cancel()
