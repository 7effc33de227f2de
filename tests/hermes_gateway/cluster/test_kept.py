"""What the coordination seam keeps besides leases, on the in-process hub and on Redis alike:
small maps one instance leaves for the next (a Discord shard's newest message ids),
gates only one instance passes at a time (a Discord IDENTIFY), and settings the first writer
fixes for the others (a Discord shard count)."""

from __future__ import annotations

import asyncio

from tests.hermes_gateway.cluster.conftest import Make

LEASE_S = 1.0


async def test_a_map_noted_by_one_instance_is_read_by_another_until_it_expires(
    make: Make,
) -> None:
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    assert await b.notes("discord:1:shard:0") == {}
    await a.note("discord:1:shard:0", {"3000": "17", "3001": "18"}, keep_s=0.5)
    assert await b.notes("discord:1:shard:0") == {"3000": "17", "3001": "18"}
    await a.note("discord:1:shard:0", {"3001": "19"}, keep_s=0.5)  # replaces the whole map
    assert await b.notes("discord:1:shard:0") == {"3001": "19"}
    assert await b.notes("discord:1:shard:1") == {}  # another name: its own map
    await asyncio.sleep(0.8)
    assert await b.notes("discord:1:shard:0") == {}


async def test_a_gate_lets_one_instance_through_then_stays_shut_for_its_time(make: Make) -> None:
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    assert await a.gate("discord:1:identify:0", 0.5) == 0.0  # passed
    shut = await b.gate("discord:1:identify:0", 0.5)
    assert 0.0 < shut <= 0.5
    assert await a.gate("discord:1:identify:0", 0.5) > 0.0  # shut for its own passer too
    assert await b.gate("discord:1:identify:1", 0.5) == 0.0  # another bucket: its own gate
    await asyncio.sleep(shut + 0.05)
    assert await b.gate("discord:1:identify:0", 0.5) == 0.0


async def test_a_setting_is_the_first_writers_and_lives_while_it_is_kept(make: Make) -> None:
    a, b = await make("a", LEASE_S), await make("b", LEASE_S)
    assert await a.settle("discord:1:shard:count", "2", keep_s=0.5) == "2"
    assert await b.settle("discord:1:shard:count", "3", keep_s=0.5) == "2"  # first wins
    await asyncio.sleep(0.3)
    assert await a.settle("discord:1:shard:count", "2", keep_s=0.5) == "2"  # kept longer
    await asyncio.sleep(0.3)
    assert await b.settle("discord:1:shard:count", "3", keep_s=0.5) == "2"  # still a's
    await asyncio.sleep(0.6)  # nobody kept it: the next writer's value counts
    assert await b.settle("discord:1:shard:count", "3", keep_s=0.5) == "3"
