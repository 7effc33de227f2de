"""Cluster mode and a failing inbox write, for a platform that does not deliver a message
again (Discord, the local API; Telegram submitted non-durably stands in for them here): the
message is never run unstored, which would lose it with its instance (no other instance could
see it to take it over). The write is tried again while the store comes back; if it does not,
the user is told (the local API: a 503)."""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp
import pytest

from hermes_gateway import server
from hermes_gateway.core import reception
from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import Client
from tests.integration.test_cluster import cluster, fast_adapter, message, tg
from tests.redis_server import needs_redis

pytestmark = [needs_redis]
__all__ = ["fast_adapter", "tg"]


def failing_accept(gw: server.Gateway, monkeypatch: pytest.MonkeyPatch, times: int) -> list[str]:
    """The next ``times`` inbox writes of ``gw`` time out; returns the ids tried."""
    accept, tried = gw.store.accept, []

    async def flaky(event: MessageEvent) -> int | None:
        tried.append(event.message_id)
        if len(tried) <= times:
            raise StoreError("store write failed: TimeoutError")
        return await accept(event)

    monkeypatch.setattr(gw.store, "accept", flaky)
    return tried


async def test_a_failed_write_is_tried_again_and_the_message_runs_stored(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = random.randint(10_000, 99_999)
    async with cluster(tmp_path, fake_llm, tg) as (a, _b):
        tried = failing_accept(a, monkeypatch, times=2)
        outcome = await a.reception.submit(message(chat, 1, "store me"))
        [reply] = await tg.wait_sent(1, chat_id=chat)
        to_run, to_send = await a.store.replayable(3600)
    assert outcome == "accepted" and tried == ["1", "1", "1"]
    assert reply["text"] == "echo: store me"
    assert to_run == [] and to_send == []  # it ran from its inbox row, now answered


async def test_a_write_that_keeps_failing_is_not_run_and_its_user_is_told(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reception, "STORE_RETRY_S", 1.0)
    chat = random.randint(10_000, 99_999)
    async with cluster(tmp_path, fake_llm, tg) as (a, _b):
        failing_accept(a, monkeypatch, times=1000)
        outcome = await a.reception.submit(message(chat, 1, "lost?"))
        [notice] = await tg.wait_sent(1, chat_id=chat)
        async with aiohttp.ClientSession() as http:
            api = Client(http, f"http://127.0.0.1:{a.control.port}")
            refused = await api.chat("and over the API?", user="ann")
    assert outcome == "unavailable"
    assert "send it again" in notice["text"]
    assert refused["status"] == 503
    assert refused["body"]["error"]["code"] == "store_unavailable"
    assert fake_llm.requests == []  # nothing ran unstored
