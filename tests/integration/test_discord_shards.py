"""A sharded bot on one process (no cluster): `shard_count` set, or what GET /gateway/bot
recommends; one discord.py client per shard, each guild's messages answered through its own
shard; with one shard nothing changes. In a cluster (two gateways in this loop, one Redis) the
instance that serves no shard still sends, and takes the shard at once when the other stops."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest

from adapters.discord.adapter import DiscordAdapter
from adapters.discord.client import point_at, restore
from adapters.discord.shards import Fleet
from hermes_gateway.events import OutboundMessage
from hermes_gateway.server import Gateway
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI
from tests.harness import eventually, make_config
from tests.integration.test_discord_kit import (
    ALICE,
    CHANNEL_ID,
    GUILD_ID,
    answered,
    discord_config,
    discord_gateway,
    fake_discord,
)
from tests.redis_server import RedisProcess

OTHER_GUILD, OTHER_CHANNEL = (1 << 22) + GUILD_ID, 3001  # on shard 1 of 2


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        fake.add_guild(OTHER_GUILD, OTHER_CHANNEL)
        yield fake


@pytest.mark.parametrize("configured", [True, False])
async def test_each_shard_brings_its_guilds_messages(
    configured: bool, tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    extra = {"shard_count": 2} if configured else {}
    fake.shard_count = 1 if configured else 2  # the setting wins over the recommendation
    config = discord_config(tmp_path, fake_llm.base_url, fake, **extra)
    async with discord_gateway(config) as (gw, _client, adapter):
        assert isinstance(adapter.fleet, Fleet) and adapter.fleet.count == 2
        await eventually(lambda: adapter.fleet is not None and len(adapter.fleet.shards) == 2)
        await eventually(lambda: adapter.health().ready, timeout=5)
        assert sorted(fake.identified) == [(0, 2), (1, 2)]
        assert "shard(s) 0, 1 of 2 connected" in adapter.health().detail
        fake.send_message("first guild", user_id=ALICE, mentions_bot=True)
        fake.send_message(
            "second guild", user_id=ALICE, mentions_bot=True, channel_id=OTHER_CHANNEL
        )
        fake.send_dm("a dm", user_id=ALICE)
        replies = await answered(fake, 3)
    by_channel = {r["channel_id"]: r["content"] for r in replies}
    assert by_channel[str(CHANNEL_ID)] == "echo: first guild"
    assert by_channel[str(OTHER_CHANNEL)] == "echo: second guild"
    assert "echo: a dm" in by_channel.values()
    assert fake.undelivered == []


async def test_one_shard_on_one_process_is_the_single_client_as_before(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (
        _gw,
        _client,
        adapter,
    ):
        fake.send_dm("hello", user_id=ALICE)
        (reply,) = await answered(fake, 1)
    assert adapter.fleet is None and fake.identified == [(0, 1)]
    assert reply["content"] == "echo: hello"


@pytest.fixture
def redis() -> Iterator[RedisProcess]:
    directory = Path(tempfile.mkdtemp(prefix="hermes-redis-", dir="/tmp"))  # short socket path
    server = RedisProcess(directory)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@contextlib.asynccontextmanager
async def instances(
    tmp_path: Path, llm: FakeOpenAI, fake: FakeDiscord, redis: RedisProcess
) -> AsyncIterator[list[Gateway]]:
    """Gateways "a" then "b" on one SQLite store and one Redis, one Discord shard."""
    suffix, gateways = uuid.uuid4().hex[:8], []
    # discord.py's endpoints are process-global and an adapter puts back at its stop what it
    # found at its start: set them first, so the first to stop leaves the fake in place
    saved = point_at(fake.api_base, fake.gateway_url)
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            section = {
                "enabled": True,
                "token": fake.token,
                "api_base": fake.api_base,
                "gateway_url": fake.gateway_url,
                "allowed_users": [ALICE],
                "guild_ready_timeout_s": 0.02,
                "identify_delay_s": 0,
                "sync_commands": False,
                "shard_count": 1,
            }
            config = make_config(
                tmp_path / name,
                llm.base_url,
                platforms={"discord": section},
                store={"url": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"},
                cluster={"redis_url": redis.url, "instance_id": f"{name}-{suffix}", "lease_s": 1},
            )
            gateway = Gateway(config)
            await gateway.startup()
            gateways.append(gateway)
        yield gateways
    finally:
        for gateway in reversed(gateways):
            await gateway.shutdown()
        restore(saved)


def discord_of(gateway: Gateway) -> DiscordAdapter:
    return cast(DiscordAdapter, gateway.adapters["discord"])


def serves(gateway: Gateway) -> bool:
    fleet = discord_of(gateway).fleet
    return fleet is not None and set(fleet.shards) == {0} and fleet.shards[0].ready


async def test_the_instance_without_a_shard_sends_and_takes_it_when_the_other_stops(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord, redis: RedisProcess
) -> None:
    async with instances(tmp_path, fake_llm, fake, redis) as (a, b):
        await eventually(lambda: serves(a) or serves(b), timeout=10)
        holder, other = (a, b) if serves(a) else (b, a)
        assert not serves(other)  # one shard: one connection in the whole cluster
        await eventually(lambda: discord_of(other).health().ready, timeout=5)
        assert "no shard of 1 here" in discord_of(other).health().detail
        assert fake.identified == [(0, 1)]
        # a reply needs only REST: the instance with no shard delivers one
        out = OutboundMessage("discord", str(CHANNEL_ID), "sent without a shard", "discord:x")
        await discord_of(other).send(out)
        assert [m["content"] for m in fake.messages_in(CHANNEL_ID)] == ["sent without a shard"]
        await holder.shutdown()  # gives the shard back: the other takes it at once
        await eventually(lambda: serves(other), timeout=5)
        fake.send_dm("still there?", user_id=ALICE)
        replies = await answered(fake, 2)
        assert [r["content"] for r in replies] == ["sent without a shard", "echo: still there?"]
