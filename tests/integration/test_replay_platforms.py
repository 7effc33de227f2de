"""Replay after a restart runs per platform: one platform that stays down (Discord refusing the
connection) holds back none of the others, and its own entries are answered when it comes back,
or expired once it stayed down longer than `store.replay_max_age_s`. Real python-telegram-bot
and discord.py against the fakes, the inbox seeded as a crash leaves it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from adapters.discord.adapter import DiscordAdapter
from hermes_gateway.config import Config
from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Store
from tests.e2e.daemon import free_port
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import dm, eventually, make_config, running_gateway
from tests.integration.test_discord_kit import ALICE, BOT_ID, CHANNEL_ID, answered
from tests.integration.test_discord_kit import TOKEN as DC_TOKEN
from tests.integration.test_telegram import TOKEN as TG_TOKEN
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
TG_CHAT = 701


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TG_TOKEN) as fake:
        yield fake


@pytest.fixture
def down_discord(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscord]:
    """A Discord nobody listens for yet (connections refused) until the test starts it; the
    adapter retries often, so it notices the comeback within a fraction of a second."""
    monkeypatch.setattr(DiscordAdapter, "restart_delay_s", 0.05)
    monkeypatch.setattr(DiscordAdapter, "restart_delay_max_s", 0.2)
    fake = FakeDiscord(token=DC_TOKEN, bot_id=BOT_ID, channel_id=CHANNEL_ID, port=free_port())
    yield fake
    fake.stop()
    assert fake.errors == []


def both(
    tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, dc: FakeDiscord, **store: Any
) -> Config:
    telegram = {
        "enabled": True,
        "token": TG_TOKEN,
        "base_url": tg.api_url,
        "base_file_url": tg.file_url,
        "allow_all": True,
    }
    discord = {
        "enabled": True,
        "token": DC_TOKEN,
        "api_base": dc.api_base,
        "gateway_url": dc.gateway_url,
        "cdn_base": dc.cdn_base,
        "allow_all": True,
        "guild_ready_timeout_s": 0.02,
        "identify_delay_s": 0,
        "sync_commands": False,
    }
    platforms = {"telegram": telegram, "discord": discord}
    return make_config(tmp_path, llm.base_url, platforms=platforms, store=store)


async def crashed_with(config: Config, *events: MessageEvent) -> None:
    """The inbox a kill leaves: these messages accepted, none answered."""
    store = Store(config.store_url)
    await store.open()
    for event in events:
        assert await store.accept(event) is not None
    await store.close()


def left_over() -> tuple[MessageEvent, MessageEvent]:
    return (
        dm("1", "telegram waited", chat=str(TG_CHAT)),
        dm("2", "discord waited", platform="discord", chat=str(CHANNEL_ID), user=str(ALICE)),
    )


def statuses(config: Config) -> dict[str, str]:
    with sqlite3.connect(config.home_path / "state.db") as db:
        return dict(db.execute("SELECT platform, status FROM inbox"))


def replay_logs(logs: list[dict[str, Any]], event: str) -> list[str]:
    return [e["platform"] for e in logs if e["event"] == event]


async def test_discord_down_holds_back_nothing_and_is_answered_when_it_comes_back(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, down_discord: FakeDiscord
) -> None:
    config = both(tmp_path, fake_llm, tg, down_discord)
    await crashed_with(config, *left_over())
    with capture_logs() as logs:
        async with running_gateway(config) as (gw, _):
            [told] = await tg.wait_sent(1, chat_id=TG_CHAT, timeout=20)
            still_down = not gw.adapters["discord"].health().ready
            waited = statuses(config)
            down_discord.start()
            [posted] = await answered(down_discord, 1, CHANNEL_ID)
    assert told["text"] == "echo: telegram waited"
    assert still_down  # Telegram's answer did not wait for Discord
    assert waited["discord"] == "accepted"  # kept for when it comes back
    assert posted["content"] == "echo: discord waited"
    assert statuses(config) == {"telegram": "answered", "discord": "answered"}
    assert replay_logs(logs, "replay.waiting") == ["discord"]
    assert sorted(replay_logs(logs, "replay.platform_done")) == ["discord", "telegram"]


async def test_a_platform_down_past_the_age_limit_has_its_entries_expired(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, down_discord: FakeDiscord
) -> None:
    # generous: the start (seeding to reading the inbox) must stay well within the limit
    # on a loaded host, else the store expires the entry before replay sees it
    config = both(tmp_path, fake_llm, tg, down_discord, replay_max_age_s=10)
    await crashed_with(config, *left_over())
    with capture_logs() as logs:
        async with running_gateway(config) as (gw, _):
            [told] = await tg.wait_sent(1, chat_id=TG_CHAT, timeout=20)
            await eventually(lambda: statuses(config)["discord"] == "expired", timeout=20)
            down_discord.start()
            await eventually(lambda: gw.adapters["discord"].health().ready)
            down_discord.send_dm("and now?", user_id=ALICE)
            [posted] = await answered(down_discord, 1)
    assert told["text"] == "echo: telegram waited"
    assert replay_logs(logs, "replay.waiting") == ["discord"]  # read for replay, not too old
    assert replay_logs(logs, "replay.expired") == ["discord"]
    assert posted["content"] == "echo: and now?"  # the expired one was never answered
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == [
        "telegram waited",
        "and now?",
    ]
