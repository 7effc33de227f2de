"""The Discord connection under stress: op 7 RECONNECT with RESUME, op 9, dropped sockets, a dead
client task, an unreachable Discord at start, a rejected token, a refused intent, bad payloads."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from structlog.testing import capture_logs

from adapters.discord.adapter import DiscordAdapter
from hermes_gateway.errors import AdapterAuthError
from hermes_gateway.server import Gateway
from tests.e2e.daemon import free_port
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import make_message, make_user, snowflake
from tests.fakes.openai import FakeOpenAI
from tests.harness import Client, eventually, running_gateway
from tests.integration.test_discord_kit import (
    ALICE,
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    TOKEN,
    answered,
    asked,
    discord_config,
    discord_gateway,
    fake_discord,
)

T = TypeVar("T")


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        yield fake


async def readyz(client: Client) -> tuple[int, list[str]]:
    status, body = await client.get("/readyz")
    return status, body.get("reasons", []) if isinstance(body, dict) else []


async def test_op7_reconnect_resumes_and_a_message_sent_meanwhile_is_answered_once(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (
        _gw,
        _client,
        adapter,
    ):
        fake.send_dm("before", user_id=ALICE)
        await answered(fake, 1)
        fake.reconnect()
        during = fake.send_dm("during the reconnect", user_id=ALICE)
        await eventually(lambda: fake.resumes == 1 and fake.connected.is_set())
        replies = await answered(fake, 2)
        fake.send_dm("after", user_id=ALICE)
        replies = await answered(fake, 3)
        health = adapter.health()
    assert asked(fake_llm) == ["before", "during the reconnect", "after"]
    assert [r["content"] for r in replies] == [
        "echo: before",
        "echo: during the reconnect",
        "echo: after",
    ]
    assert replies[1]["message_reference"]["message_id"] == during["id"]
    assert (fake.identifies, fake.resumes, adapter.disconnects) == (1, 1, 1)
    assert (health.ready, health.detail) == (True, "resumed")


async def test_op9_identifies_again_fetches_what_it_missed_and_readyz_follows(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    # a visible gap: Discord asks for a pause before a new IDENTIFY
    config = discord_config(tmp_path, fake_llm.base_url, fake, identify_delay_s=0.3)
    async with discord_gateway(config) as (_gw, client, adapter):
        fake.send_dm("before", user_id=ALICE)
        await answered(fake, 1)
        assert (await readyz(client))[0] == 200
        fake.invalid_session(resumable=False)
        _status, reasons = await until(lambda: _not_ready(client))
        missed = fake.send_dm("sent while the session was gone", user_id=ALICE)
        await until(lambda: _ready(client))
        replies = await answered(fake, 2)
        fake.send_dm("after", user_id=ALICE)
        replies = await answered(fake, 3)
    assert reasons == ["discord: disconnected; reconnecting"]
    assert [event for event, _ in fake.undelivered] == ["MESSAGE_CREATE"]  # never dispatched
    assert asked(fake_llm) == ["before", "sent while the session was gone", "after"]
    assert replies[1]["message_reference"]["message_id"] == missed["id"]
    assert (fake.identifies, fake.resumes, adapter.sessions) == (2, 0, 2)


async def until(check: Callable[[], Awaitable[T | None]], timeout: float = 5) -> T:
    """Poll an async ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        assert time.monotonic() < deadline, f"not true within {timeout}s"
        await asyncio.sleep(0.005)
    return value


async def _ready(client: Client) -> bool:
    return (await readyz(client))[0] == 200


async def _not_ready(client: Client) -> tuple[int, list[str]] | None:
    status, reasons = await readyz(client)
    return (status, reasons) if status == 503 else None


async def test_a_dropped_socket_resumes_and_nothing_is_lost(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (
        _gw,
        client,
        adapter,
    ):
        fake.drop_socket()  # no close frame: 1006
        fake.call_soon(time.sleep, 0.5)  # Discord is slow to take the new connection
        fake.send_dm("while down", user_id=ALICE)
        status, reasons = await until(lambda: _not_ready(client))
        await until(lambda: _ready(client))
        (reply,) = await answered(fake, 1)
    assert reasons == ["discord: disconnected; reconnecting"]
    assert reply["content"] == "echo: while down"
    assert (fake.identifies, fake.resumes, adapter.disconnects) == (1, 1, 1)
    assert asked(fake_llm) == ["while down"]


async def test_a_dead_client_and_a_dead_watcher_are_restarted(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DiscordAdapter, "restart_delay_s", 0.05)
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (
        _gw,
        _client,
        adapter,
    ):
        first, run_client = adapter.client, adapter._run_client
        calls: list[object] = []

        async def crash_once(client: Any) -> str:
            calls.append(client)
            if len(calls) == 1:
                raise RuntimeError("a bug in the watcher")
            return await run_client(client)

        monkeypatch.setattr(adapter, "_run_client", crash_once)
        with capture_logs() as logs:
            fake.drop_socket(4012)  # a close code discord.py does not reconnect from
            await eventually(lambda: fake.identifies == 2 and adapter.health().ready)
        fake.send_dm("back?", user_id=ALICE)
        (reply,) = await answered(fake, 1)
    assert adapter.client is not first
    assert len(calls) == 2
    assert reply["content"] == "echo: back?"
    events = [e["event"] for e in logs]
    assert events.index("discord.connection_closed") < events.index("discord.restarting")
    assert "discord.connect_failed" in events  # the watcher crashed; the supervisor retried


async def test_an_unreachable_discord_at_start_is_retried_in_the_background(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DiscordAdapter, "restart_delay_s", 0.05)
    port = free_port()
    later = FakeDiscord(token=TOKEN, bot_id=BOT_ID, channel_id=CHANNEL_ID, port=port)
    config = discord_config(tmp_path, fake_llm.base_url, later)  # nothing listens there yet
    async with running_gateway(config) as (gw, client):
        adapter = gw.adapters["discord"]
        status, _ = await client.get("/healthz")
        not_ready = await readyz(client)
        assert not adapter.health().ready
        later.start()
        try:
            await eventually(lambda: adapter.health().ready)
            later.send_dm("finally", user_id=ALICE)
            (reply,) = await answered(later, 1)
        finally:
            later.stop()
    assert status == 200
    assert not_ready[0] == 503
    assert not_ready[1][-1].startswith("discord: login failed")
    assert reply["content"] == "echo: finally"
    assert later.errors == []


async def test_a_rejected_token_fails_start_with_an_auth_error(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    config = discord_config(tmp_path, fake_llm.base_url, fake, token="not-the-token")
    gateway = Gateway(config)
    try:
        with pytest.raises(AdapterAuthError, match=r"platforms\.discord\.token"):
            await gateway.startup()
    finally:
        await gateway.shutdown()
    assert fake.requests == [("GET", "/users/@me")]
    assert fake.identifies == 0


async def test_without_the_content_intent_mentions_and_dms_still_work(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    fake.message_content_intent = False  # off in the Developer Portal: IDENTIFY gets 4014
    with capture_logs() as logs:
        async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
            fake.send_message("unaddressed text", user_id=ALICE)
            fake.send_message("hello bot", user_id=ALICE, mentions_bot=True)
            fake.send_dm("hello in private", user_id=ALICE)
            await answered(fake, 2)
    assert fake.identifies == 2
    assert sorted(asked(fake_llm)) == ["hello bot", "hello in private"]
    warnings = [
        e for e in logs if e["event"] in ("discord.intent_disallowed", "discord.empty_content")
    ]
    assert {e["event"] for e in warnings} == {"discord.intent_disallowed", "discord.empty_content"}
    assert all("MESSAGE CONTENT intent" in e["hint"] for e in warnings)


async def test_payloads_that_are_not_conversation_or_do_not_parse_are_dropped(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    alice = make_user(ALICE, "alice")
    pinned = make_message(
        snowflake(), CHANNEL_ID, alice, f"<@{BOT_ID}> pinned", guild_id=GUILD_ID, type=6
    )
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (
        _gw,
        _client,
        adapter,
    ):
        with capture_logs() as logs:
            broken = {"id": str(snowflake()), "channel_id": str(CHANNEL_ID), "content": "x"}
            fake.dispatch("MESSAGE_CREATE", broken)  # no author, timestamp, ...: a KeyError
            fake.dispatch("MESSAGE_CREATE", pinned)  # a system message, not conversation
            fake.dispatch("SOMETHING_NEW", {"what": "ever"})
            fake.send_dm("still fine?", user_id=ALICE)
            (reply,) = await answered(fake, 1)
    assert reply["content"] == "echo: still fine?"
    assert asked(fake_llm) == ["still fine?"]
    assert (fake.identifies, adapter.disconnects) == (1, 0)
    assert [e["gateway_event"] for e in logs if e["event"] == "discord.bad_payload"] == [
        "MESSAGE_CREATE"
    ]
