"""Two instances of a sharded bot (a shard client each, on two coordinators sharing one Redis,
or one in-process hub) never IDENTIFY within `identify_delay_s` of each other, first IDENTIFYs
and fresh ones after a session Discord would not resume alike: each passes its `max_concurrency`
bucket's gate in the coordination store first. Alone, a bot spaces only its own as before."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import discord
import pytest

from adapters.discord.client import HermesClient
from adapters.discord.identify import Pacer
from adapters.discord.settings import DiscordConfig
from hermes_gateway.cluster.leadership import ClusterLeader
from hermes_gateway.cluster.lease import Coordinator
from hermes_gateway.cluster.local import LocalCoordinator, LocalHub
from hermes_gateway.cluster.shares import ClusterShares, SoleShares
from hermes_gateway.platforms.adapter import Shares
from tests.fakes.discord import FakeDiscord
from tests.harness import eventually
from tests.redis_server import RedisProcess

TOKEN, BOT_ID = "dc-token", 1000
ROLE = f"discord:{BOT_ID}:shard"
DELAY = 2.0  # identify_delay_s
SLACK = 0.5  # what loop lag may take off a gap between two IDENTIFYs the fake saw


class Quiet:
    """The client's events, unused: only the IDENTIFYs matter here."""

    async def on_ready(self) -> None: ...

    async def on_resumed(self) -> None: ...

    async def on_disconnect(self) -> None: ...

    async def on_message(self, message: discord.Message) -> None: ...

    async def on_command(self, interaction: Any, name: str, args: str) -> None: ...


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(token=TOKEN, bot_id=BOT_ID).start()
    fake.add_guild((1 << 22) + 2000, 3001)  # on shard 1 of 2
    yield fake
    fake.stop()
    assert fake.errors == []


@pytest.fixture(params=["redis", "local"])
def coordinators(request: pytest.FixtureRequest) -> Iterator[list[Coordinator]]:
    """Instances "a" and "b" on one Redis of the test's own, or on one in-process hub."""
    if request.param == "local":
        hub = LocalHub()
        yield [LocalCoordinator(name, 3.0, hub) for name in "ab"]
        return
    from hermes_gateway.cluster.on_redis import RedisCoordinator

    directory = Path(tempfile.mkdtemp(prefix="hermes-redis-", dir="/tmp"))  # short socket path
    server = RedisProcess(directory)
    server.start()
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    try:
        yield [RedisCoordinator(server.url, name, 3.0, prefix=prefix) for name in "ab"]
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def cluster_shares(coordinator: Coordinator) -> ClusterShares:
    return ClusterShares(coordinator, ROLE, 2, lambda role: ClusterLeader(coordinator, role))


@contextlib.asynccontextmanager
async def shard_clients(fake: FakeDiscord, shares: list[Shares]) -> AsyncIterator[None]:
    """Shard n of 2 connected with its own `Pacer` over ``shares[n]``, both at once."""
    config = DiscordConfig(token=TOKEN, identify_delay_s=DELAY, guild_ready_timeout_s=0.02)
    clients = [
        HermesClient(Quiet(), config, shard=(n, 2), pace=Pacer(shares[n], lambda: DELAY))
        for n in range(2)
    ]
    with fake.patched():
        tasks = [asyncio.create_task(client.start(TOKEN)) for client in clients]
        try:
            yield
        finally:
            for client in clients:
                await client.close()
            await asyncio.gather(*tasks, return_exceptions=True)


def gaps(times: list[float]) -> list[float]:
    ordered = sorted(times)
    return [round(later - earlier, 3) for earlier, later in itertools.pairwise(ordered)]


async def test_two_instances_never_identify_within_the_delay_of_each_other(
    fake: FakeDiscord, coordinators: list[Coordinator]
) -> None:
    for coordinator in coordinators:
        await coordinator.start()
    try:
        async with shard_clients(fake, [cluster_shares(c) for c in coordinators]):
            await eventually(lambda: len(fake.identify_times) == 2, timeout=4 * DELAY)
            assert sorted(fake.identified) == [(0, 2), (1, 2)]
            for shard in (0, 1):  # sessions Discord will not resume: both IDENTIFY again
                fake.invalid_session(resumable=False, shard=shard)
            await eventually(lambda: len(fake.identify_times) == 4, timeout=6 * DELAY)
    finally:
        for coordinator in coordinators:
            await coordinator.close()
    assert min(gaps(fake.identify_times)) >= DELAY - SLACK, gaps(fake.identify_times)


async def test_alone_each_instance_spaces_only_its_own(fake: FakeDiscord) -> None:
    # two separate processes without a cluster: nothing shared, so nothing waits
    async with shard_clients(fake, [SoleShares(2), SoleShares(2)]):
        await eventually(lambda: len(fake.identify_times) == 2, timeout=4 * DELAY)
    assert min(gaps(fake.identify_times)) < DELAY - SLACK, gaps(fake.identify_times)
