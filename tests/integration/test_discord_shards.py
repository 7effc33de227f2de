"""A sharded bot on one process (no cluster): `shard_count` set, or what GET /gateway/bot
recommends; one discord.py client per shard, each guild's messages answered through its own
shard; a shard that loses its session catches up on its own; with one shard nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.discord.shards import Fleet
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI
from tests.harness import eventually
from tests.integration.test_discord_kit import (
    ALICE,
    CHANNEL_ID,
    GUILD_ID,
    answered,
    discord_config,
    discord_gateway,
    fake_discord,
)

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
