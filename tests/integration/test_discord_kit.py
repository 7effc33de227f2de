"""Shared setup for the Discord integration tests (no tests here): a `FakeDiscord`, a gateway
whose Discord adapter (the real discord.py) is pointed at it, and small observation helpers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

from adapters.discord.adapter import DiscordAdapter
from hermes_gateway.config import Config
from hermes_gateway.core.bus import LifecycleEvent
from hermes_gateway.events import MessageEvent
from hermes_gateway.server import Gateway
from tests.fakes.discord import FakeDiscord
from tests.harness import Client, eventually, make_config, running_gateway

TOKEN = "dc-token"
BOT_ID, GUILD_ID, CHANNEL_ID = 1000, 2000, 3000
ALICE, BOB, STRANGER = 42, 43, 99


@contextlib.contextmanager
def fake_discord() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(
        token=TOKEN, bot_id=BOT_ID, bot_name="hermes", guild_id=GUILD_ID, channel_id=CHANNEL_ID
    ).start()
    try:
        yield fake
    finally:
        fake.stop()
    assert fake.errors == []


def discord_config(
    tmp_path: Path,
    llm_url: str,
    fake: FakeDiscord,
    *,
    runner: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
    **discord: Any,
) -> Config:
    section = {
        "enabled": True,
        "token": TOKEN,
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        "cdn_base": fake.cdn_base,
        "allowed_users": [ALICE, str(BOB)],
        "guild_ready_timeout_s": 0.02,
        "identify_delay_s": 0,
        "sync_commands": False,
        **discord,
    }
    extra = {name: value for name, value in (("runner", runner), ("tools", tools)) if value}
    return make_config(tmp_path, llm_url, platforms={"discord": section}, **extra)


@contextlib.asynccontextmanager
async def discord_gateway(config: Config) -> AsyncIterator[tuple[Gateway, Client, DiscordAdapter]]:
    """A running gateway whose Discord adapter has seen READY."""
    async with running_gateway(config) as (gw, client):
        adapter = cast(DiscordAdapter, gw.adapters["discord"])
        adapter.outbox.retry_base_delay = 0.01
        await eventually(lambda: adapter.health().ready, timeout=5)
        yield gw, client, adapter


class Received:
    """Every `message_received` event on the bus, to check normalization."""

    def __init__(self, gw: Gateway) -> None:
        self.events: list[MessageEvent] = []
        gw.bus.subscribe(self._on, ["message_received"], name="test:received")

    async def _on(self, ev: LifecycleEvent) -> None:
        if ev.message is not None:
            self.events.append(ev.message)


def bot_posts(fake: FakeDiscord, channel_id: int | None = None) -> list[dict[str, Any]]:
    """Messages the bot POSTed (edits applied), optionally in one channel only."""
    return [m for m in fake.sent if channel_id is None or int(m["channel_id"]) == channel_id]


def referenced_id(message: dict[str, Any]) -> str | None:
    reference = message.get("message_reference")
    return reference["message_id"] if reference else None


def asked(fake_llm: Any) -> list[str]:
    """The last user message of every model request, in order."""
    return [r["messages"][-1]["content"] for r in fake_llm.requests]


async def answered(
    fake: FakeDiscord, n: int, channel_id: int | None = None
) -> list[dict[str, Any]]:
    """Wait until the bot has posted ``n`` messages (in ``channel_id``); return them."""
    await eventually(lambda: len(bot_posts(fake, channel_id)) >= n, timeout=10)
    return bot_posts(fake, channel_id)
