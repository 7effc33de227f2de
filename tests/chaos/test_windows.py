"""The crash windows, each forced open deterministically in-process: where a SIGKILL would lose a
message or answer it twice. Found by the crash chaos (`test_crash.py`); each test here failed
before its fix."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Store
from tests.chaos.kit import (
    ChaosTelegram,
    Driver,
    env_number,
    percentile,
    record,
    telegram_config,
    tokens_in,
)
from tests.e2e.daemon import free_port
from tests.fakes.openai import FakeOpenAI, Response, last_user_text, text
from tests.harness import eventually, running_gateway
from tests.security import keys

pytestmark = [
    pytest.mark.usefixtures("fast_telegram"),
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]


async def test_telegram_is_told_an_update_was_taken_only_once_it_is_in_the_inbox(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """python-telegram-bot confirms a batch (the next getUpdates offset) as soon as it has
    queued it, before the gateway stored it: a kill in between lost the message for good."""
    async with running_gateway(telegram_config(tmp_path, llm, tg)) as (gw, _):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        entered, release = asyncio.Event(), asyncio.Event()
        accept = gw.store.accept

        async def slow_accept(event: MessageEvent) -> int | None:
            entered.set()
            await release.wait()  # the inbox write is slow (or the process is about to die)
            return await accept(event)

        monkeypatch.setattr(gw.store, "accept", slow_accept)
        update = tg.send_text(1001, "#c1001-m1 keep me")
        await asyncio.wait_for(entered.wait(), 5)
        await asyncio.sleep(0.3)  # long enough for the poller to ask for the next batch
        unconfirmed = [u["update_id"] for u in tg.pending_updates]
        release.set()
        [reply] = await tg.wait_sent(1, chat_id=1001)
        await eventually(lambda: not tg.pending_updates)  # confirmed once stored
    assert update["update_id"] in unconfirmed
    assert reply["text"] == "echo: #c1001-m1 keep me"


async def test_a_webhook_update_is_acknowledged_only_once_it_is_in_the_inbox(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The webhook answered 200 (Telegram then forgets the update) once the update was queued
    for python-telegram-bot, before the gateway stored it."""
    port = free_port()
    config = telegram_config(
        tmp_path,
        llm,
        tg,
        control={"port": port},
        telegram={
            "mode": "webhook",
            "webhook_url": f"http://127.0.0.1:{port}/telegram/webhook",
            "webhook_secret": keys.WEBHOOK_SECRET,
        },
    )
    async with running_gateway(config) as (gw, _):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        entered, release = asyncio.Event(), asyncio.Event()
        accept = gw.store.accept

        async def slow_accept(event: MessageEvent) -> int | None:
            entered.set()
            await release.wait()
            return await accept(event)

        monkeypatch.setattr(gw.store, "accept", slow_accept)
        tg.send_text(1001, "#c1001-m1 by webhook")
        await asyncio.wait_for(entered.wait(), 5)
        await asyncio.sleep(0.3)
        acknowledged = list(tg.webhook_deliveries)
        release.set()
        [reply] = await tg.wait_sent(1, chat_id=1001)
        await eventually(lambda: tg.webhook_deliveries)
    assert acknowledged == []
    assert [d["status"] for d in tg.webhook_deliveries] == [200]
    assert reply["text"] == "echo: #c1001-m1 by webhook"


async def test_a_message_arriving_while_the_replay_starts_is_answered_once(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start the replay read "every unanswered inbox entry" after intake had begun, so a
    message accepted by the live path in between was run twice (or its reply sent twice)."""
    config = telegram_config(tmp_path, llm, tg, chats=(1001, 1002))
    left_over = MessageEvent.create(
        platform="telegram",
        chat_type="dm",
        chat_id="1001",
        user_id="1001",
        message_id="1",
        text="#c1001-m1 from before the crash",
    )
    store = Store(config.store_url)
    await store.open()
    await store.accept(left_over)  # accepted, never answered: the crash
    await store.close()
    tg.send_text(1002, "#c1002-m1 sent while the bot was down")

    def model(body: dict[str, Any]) -> Response:
        asked = last_user_text(body)
        return text(f"ack {asked.split()[0]}", delay=0.8 if "c1002" in asked else 0.0)

    llm.responder = model
    replayable = Store.replayable

    async def slow_replayable(self: Store, max_age_s: float) -> Any:
        await asyncio.sleep(0.4)  # a big inbox, a slow disk: the live path gets there first
        return await replayable(self, max_age_s)

    monkeypatch.setattr(Store, "replayable", slow_replayable)
    async with running_gateway(config) as (gw, _):
        await tg.wait_sent(1, chat_id=1001, timeout=10)
        await tg.wait_sent(1, chat_id=1002, timeout=10)
        await asyncio.sleep(1.0)  # time for a second answer, if one were coming
    assert [m["text"] for m in tg.messages_to(1001)] == ["ack #c1001-m1"]
    assert [m["text"] for m in tg.messages_to(1002)] == ["ack #c1002-m1"]
    assert sorted(last_user_text(r).split()[0] for r in llm.requests) == [
        "#c1001-m1",
        "#c1002-m1",
    ]


@pytest.mark.slow
async def test_the_window_for_a_doubled_answer_is_measured(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one window left: Telegram has taken the reply, the gateway has not yet committed
    "answered". A kill inside it sends the reply again at the next start. How wide is it?"""
    chats = (1001, 1002, 1003, 1004)
    async with running_gateway(telegram_config(tmp_path, llm, tg, chats=chats)) as (gw, _):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        committed: dict[str, float] = {}
        mark = gw.store.mark

        async def timed_mark(ids: Any, status: str, reply: str | None = None) -> None:
            await mark(ids, status, reply)
            for token in tokens_in({"text": reply}):
                committed[token] = time.monotonic()

        monkeypatch.setattr(gw.store, "mark", timed_mark)
        driver = Driver(tg, list(chats), seed=3).start()
        await asyncio.sleep(env_number("HERMES_WINDOW_SECONDS", 10))
        driver.stop()
        await eventually(lambda: not driver.unanswered(), timeout=10)
    windows = []
    for msg, at in zip(tg.sent, tg.sent_at, strict=False):
        for token in tokens_in(msg):
            if token in committed:
                windows.append(committed[token] - at)
    assert len(windows) == len(driver.sent) >= 20
    assert all(w > 0 for w in windows)
    figures = {
        "answers": len(windows),
        "window_p50_ms": round(percentile(windows, 0.5) * 1000, 2),
        "window_p99_ms": round(percentile(windows, 0.99) * 1000, 2),
        "window_max_ms": round(max(windows) * 1000, 2),
    }
    record("double_window", figures)
    assert figures["window_p50_ms"] < 100, figures
