"""Telegram resilience against the real python-telegram-bot and `FakeTelegram`: a rejected
token, Telegram unreachable at start, 409 conflicts, stalled and dead polling, the per-token
lock, and webhook mode with its secret."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.errors import AdapterAuthError
from hermes_gateway.server import Gateway
from tests.e2e.daemon import free_port
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram, make_chat, make_message, make_user
from tests.harness import Client, eventually, running_gateway
from tests.integration.test_telegram import TOKEN, texts, tg_config
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
CONFLICT = "Conflict: terminated by other getUpdates request; make sure that only one bot runs"


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


async def readiness(client: Client) -> tuple[int, list[str]]:
    status, body = await client.get("/readyz")
    return status, body["reasons"]


async def reason_containing(client: Client, needle: str) -> str:
    """Wait until `/readyz` is 503 with a reason containing ``needle``; return it."""

    async def check() -> str | None:
        status, reasons = await readiness(client)
        found = [r for r in reasons if needle in r]
        return found[0] if status == 503 and found else None

    deadline = time.monotonic() + 10
    while (found := await check()) is None:
        assert time.monotonic() < deadline, f"/readyz never said {needle!r}"
        await asyncio.sleep(0.02)
    return found


async def test_rejected_token_fails_the_start_as_a_config_error(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    gw = Gateway(tg_config(tmp_path, fake_llm, tg, token="999:WRONG"))
    try:
        with pytest.raises(AdapterAuthError, match=r"platforms\.telegram\.token"):
            await gw.startup()
        detail = gw.adapters["telegram"].health().detail
    finally:
        await gw.shutdown()
    assert "token rejected" in detail and "401" in detail
    assert "WRONG" not in detail  # the token is a secret


async def test_unreachable_telegram_does_not_block_start_and_is_retried(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    port = free_port()
    fake = FakeTelegram(token=TOKEN, port=port)  # not started yet: Telegram is "down"
    started = time.monotonic()
    async with running_gateway(tg_config(tmp_path, fake_llm, fake)) as (gw, client):
        assert time.monotonic() - started < 3
        status, _ = await client.get("/healthz")
        assert status == 200
        reason = await reason_containing(client, "connecting to Telegram")
        fake.start()
        try:
            await eventually(lambda: gw.adapters["telegram"].health().ready)
            fake.send_text(555, "are you up?")
            [reply] = await fake.wait_sent(1, chat_id=555)
        finally:
            fake.stop()
    assert reason.startswith("telegram: connecting to Telegram (attempt") and "failed" in reason
    assert reply["text"] == "echo: are you up?"


async def test_conflict_shows_in_readyz_and_polling_recovers(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, client):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        with capture_logs() as logs:
            tg.fail_next("getUpdates", 409, description=CONFLICT, times=2)
            reason = await reason_containing(client, "409")
            await eventually(lambda: gw.adapters["telegram"].health().ready, timeout=10)
        tg.send_text(555, "back?")
        [reply] = await tg.wait_sent(1, chat_id=555)
    assert "409 Conflict" in reason and "only one bot" in reason
    conflicts = [e for e in logs if e["event"] == "telegram.conflict"]
    assert len(conflicts) == 1 and conflicts[0]["log_level"] == "error"
    assert reply["text"] == "echo: back?"


async def test_stalled_polling_is_reported_and_health_stays_responsive(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TelegramAdapter, "request_timeout", 1.0)
    monkeypatch.setattr(TelegramAdapter, "stall_grace", 0.2)
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, client):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        tg.stall_get_updates = True
        tg.send_text(555, "stuck in the pipe")
        for _ in range(5):
            started = time.monotonic()
            status, _ = await client.get("/healthz")
            assert status == 200 and time.monotonic() - started < 0.5
        reason = await reason_containing(client, "stalled")
        assert tg.messages_to(555) == []
        tg.stall_get_updates = False
        [reply] = await tg.wait_sent(1, chat_id=555)
        await eventually(lambda: gw.adapters["telegram"].health().ready)
    assert "no answer from getUpdates" in reason
    assert reply["text"] == "echo: stuck in the pipe"


async def test_dead_polling_loop_is_restarted(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TelegramAdapter, "request_timeout", 0.5)
    monkeypatch.setattr(TelegramAdapter, "stall_grace", 0.1)
    monkeypatch.setattr(TelegramAdapter, "retry_max", 0.2)
    monkeypatch.setattr(TelegramAdapter, "watch_interval", 0.05)
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        adapter = gw.adapters["telegram"]
        assert isinstance(adapter, TelegramAdapter)
        await eventually(lambda: adapter.health().ready)
        polling = adapter._polling
        assert polling is not None
        with capture_logs() as logs:
            polling.cancel()  # polling ends, the process goes on: a zombie
            tg.send_text(555, "anyone?")
            [reply] = await tg.wait_sent(1, chat_id=555)
    assert [e["event"] for e in logs if e["event"] == "telegram.polling_restart"]
    assert reply["text"] == "echo: anyone?"


async def test_second_gateway_on_the_same_token_stands_by(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg)
    first = Gateway(config)
    await first.startup()
    try:
        await eventually(lambda: first.adapters["telegram"].health().ready)
        async with running_gateway(config) as (second, client):
            reason = await reason_containing(client, "another gateway on this host")
            get_me = sum(1 for n, _ in tg.calls if n == "getMe")
            await first.shutdown()  # the first one goes away: the second takes over
            await eventually(lambda: second.adapters["telegram"].health().ready)
            tg.send_text(555, "who is there?")
            [reply] = await tg.wait_sent(1, chat_id=555)
    finally:
        if not first.intake_closed.is_set():
            await first.shutdown()
    assert get_me == 1  # the second gateway did not even call getMe while locked out
    assert TOKEN not in reason and "telegram-" in reason
    assert reply["text"] == "echo: who is there?"


async def test_webhook_mode_checks_the_secret_and_ignores_junk(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    port = free_port()
    hook = f"http://127.0.0.1:{port}/telegram/webhook"
    config = tg_config(
        tmp_path, fake_llm, tg, mode="webhook", webhook_url=hook, webhook_secret="s3cret-value"
    )
    config = config.model_copy(update={"control": config.control.model_copy(update={"port": port})})
    chat, alice = make_chat(555), make_user(555, "alice")
    junk: list[Any] = [
        {"update_id": 1, "edited_message": make_message(90, chat, alice, "edited", edit_date=1)},
        {"update_id": 2, "channel_post": make_message(91, make_chat(-9, "channel"), None, "p")},
        {"update_id": 3, "callback_query": {"id": "q", "from": alice, "chat_instance": "1"}},
        {"update_id": 4, "future_kind": {"x": 1}},
        {"update_id": 5, "message": "not a message"},
        ["not", "an", "update"],
    ]
    async with running_gateway(config) as (gw, client):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        assert tg.webhook is not None
        assert tg.webhook["secret_token"] == "s3cret-value" and tg.webhook["url"] == hook
        statuses = []
        for secret in ("wrong", None):
            headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret else {}
            async with client.http.post(hook, json=junk[0], headers=headers) as resp:
                statuses.append(resp.status)
        good = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-value"}
        for body in junk:
            async with client.http.post(hook, json=body, headers=good) as resp:
                statuses.append(resp.status)
        async with client.http.post(hook, data=b"{nope", headers=good) as resp:
            statuses.append(resp.status)
        tg.send_text(555, "via the webhook")
        [reply] = await tg.wait_sent(1, chat_id=555)
        deliveries = list(tg.webhook_deliveries)
    assert statuses == [403, 403, 200, 200, 200, 200, 200, 200, 400]
    assert reply["text"] == "echo: via the webhook"
    assert [d["status"] for d in deliveries] == [200]
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["via the webhook"]
    assert "getUpdates" not in [n for n, _ in tg.calls]


async def test_shutdown_confirms_what_was_fetched(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        tg.send_text(555, "one")
        await tg.wait_sent(1, chat_id=555)
    assert tg.pending_updates == []  # a restart will not see "one" again
    assert texts(tg, 555) == ["echo: one"]
