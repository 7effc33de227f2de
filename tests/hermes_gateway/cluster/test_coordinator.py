"""The coordination seam's contract, kept by the in-process coordinator and by Redis alike:
leases with expiry and takeover under growing fencing tokens, leader failover, the control
channel's order and at-least-once delivery, and a paused holder the store then fences out."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hermes_gateway.cluster.lease import Control, Seen
from hermes_gateway.errors import FencedOut
from hermes_gateway.store.store import Store
from tests.harness import dm
from tests.hermes_gateway.cluster.conftest import Make

KEY = "telegram:dm:555"  # the session of tests.harness.dm
LEASE_S = 1.0


async def past_expiry() -> None:
    """Longer than a lease: the holder neither renewed nor released it."""
    await asyncio.sleep(LEASE_S * 1.5)


async def test_a_lease_is_exclusive_until_it_expires_then_taken_over(make: Make) -> None:
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    first = await a.acquire(KEY)
    assert first is not None and first.live and first.owner == "a"
    assert await b.acquire(KEY) is None  # held: refused, not queued
    assert await a.owner(KEY) == "a" == await b.owner(KEY)
    again = await a.acquire(KEY)  # the holder asking again keeps its token
    assert again is not None and again.token == first.token
    renewed = await a.renew(first)
    assert renewed is not None and renewed.deadline >= first.deadline
    await past_expiry()
    assert await a.owner(KEY) is None
    second = await b.acquire(KEY)
    assert second is not None and second.token > first.token
    assert await a.renew(first) is None  # the old holder learns it lost the lease
    await a.release(first)  # and its late release does not free the new holder's
    assert await a.owner(KEY) == "b"
    await b.release(second)
    assert await b.owner(KEY) is None
    third = await a.acquire(KEY)
    assert third is not None and third.token > second.token


async def test_a_paused_holder_cannot_write_after_its_lease_passed_on(
    make: Make, tmp_path: Path
) -> None:
    """The holder stops renewing (a GC pause, SIGSTOP, a partition) and wakes up after another
    instance took the session over: the store refuses its turn and its inbox transitions."""
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        inbox_id = await store.accept(dm("1", "hello"))
        assert inbox_id is not None
        paused = await a.acquire(KEY)
        assert paused is not None
        await store.claim(paused.fence)
        await store.progress([inbox_id], 0, fence=paused.fence)  # fine while it holds it
        await past_expiry()
        successor = await b.acquire(KEY)
        assert successor is not None
        await store.claim(successor.fence)
        turn = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "stale"}]
        with pytest.raises(FencedOut):
            await store.complete_turn(KEY, turn, [inbox_id], "stale", "run-a", fence=paused.fence)
        with pytest.raises(FencedOut):
            await store.mark([inbox_id], "answered", reply="stale", fence=paused.fence)
        assert await store.history(KEY) == []
        to_run, to_send = await store.replayable(3600)
        assert [i for i, _ in to_run] == [inbox_id] and to_send == []  # still the successor's
        await store.complete_turn(KEY, turn, [inbox_id], "ok", "run-b", fence=successor.fence)
    finally:
        await store.close()


async def test_the_leader_lease_fails_over_when_the_leader_stops_renewing(make: Make) -> None:
    role = "telegram-poller:bot1"
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    leading = await a.lead(role)
    assert leading is not None and await b.lead(role) is None
    assert await b.leader(role) == "a"
    assert await a.acquire(role) is not None  # a session of that name is another lease
    for _ in range(3):  # renewed in time, it stays the leader's across several lease times
        await asyncio.sleep(LEASE_S / 2)
        renewed = await a.renew(leading)
        assert renewed is not None
        leading = renewed
        assert await b.lead(role) is None
    await past_expiry()  # the leader died
    standby = await b.lead(role)
    assert standby is not None and standby.token > leading.token
    assert await a.renew(leading) is None and await a.leader(role) == "b"


async def test_control_messages_arrive_in_order_at_least_once_handled_once(make: Make) -> None:
    sender, owner = await make("a", LEASE_S), await make("b", LEASE_S)
    kinds = ["queued", "steer", "interrupt", "steer", "stop"]
    sent = [Control(kind, KEY, text=f"m{i}", sender="a") for i, kind in enumerate(kinds)]  # type: ignore[arg-type]
    for message in sent:
        await sender.send("b", message)
    seen, handled = Seen(), []

    async def handle(reader: object, n: int, *, ack: bool) -> None:
        for _ in range(n):
            message = await asyncio.wait_for(reader.receive(), 5)  # type: ignore[attr-defined]
            if seen.first_time(message):
                handled.append(message.text)
            if ack:
                await reader.ack(message)  # type: ignore[attr-defined]

    await handle(owner, 2, ack=True)
    await handle(owner, 1, ack=False)  # taken, then the reader dies before acknowledging it
    restarted = await make("b", LEASE_S)  # the same instance id, a new process
    message = await asyncio.wait_for(restarted.receive(), 5)
    assert (message.id, message.text) == (sent[2].id, "m2")  # delivered again...
    assert not seen.first_time(message)  # ...and recognised as handled
    await restarted.ack(message)
    await handle(restarted, 2, ack=True)
    assert handled == ["m0", "m1", "m2", "m3", "m4"]
    assert [m.kind for m in sent] == kinds
    with pytest.raises(TimeoutError):  # everything acknowledged: nothing comes again
        await asyncio.wait_for(restarted.receive(), 1.5)


async def test_renew_all_and_release_all_keep_each_lease_apart(make: Make) -> None:
    """One call for many leases: each is renewed (or released) only while still its holder's;
    one lost to another instance comes back None and stays the other's."""
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    mine = [await a.acquire(f"{KEY}:{i}") for i in range(3)]
    assert all(lease is not None for lease in mine)
    held = [lease for lease in mine if lease is not None]
    await a.release(held[1])
    taken = await b.acquire(f"{KEY}:1")  # the middle one is b's now
    assert taken is not None
    renewed = await a.renew_all(held)
    assert [r is not None for r in renewed] == [True, False, True]
    assert renewed[0] is not None and renewed[0].deadline >= held[0].deadline
    await a.release_all(held)  # b's lease stays: a's token there is stale
    assert [await a.owner(f"{KEY}:{i}") for i in range(3)] == [None, "b", None]
    assert await a.renew_all([]) == []
