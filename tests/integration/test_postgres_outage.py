"""A PostgreSQL server that goes away for a while and comes back, under a running gateway: every
message is answered or told why not, `/readyz` says what is wrong meanwhile, and the store
recovers by itself within a second or two of the server's return, with no restart.

Each test stops or freezes a server of its own (tests/pg_server.py), never the shared one;
they need the PostgreSQL binaries (CI installs them), not HERMES_TEST_POSTGRES.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.core.run import STORE_DOWN
from hermes_gateway.store.engine import CONNECT_TIMEOUT_S
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import Client, make_config, running_gateway
from tests.pg_server import ThrowawayPostgres, pg_bin

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
TOKEN = "123:ABC"
SILENT = {"telegram.update_failed", "control.handler_failed", "run.crashed"}


@pytest.fixture
async def own_pg() -> AsyncIterator[ThrowawayPostgres]:
    bindir = pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (CI installs the postgresql package)")
    server = ThrowawayPostgres(bindir)
    try:
        await asyncio.to_thread(server.start)
        yield server
    finally:
        await asyncio.to_thread(server.close)


@pytest.fixture
def tg(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(TelegramAdapter, "poll_timeout", 1.0)
    monkeypatch.setattr(TelegramAdapter, "retry_first", 0.1)
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


async def thaw_after(server: ThrowawayPostgres, seconds: float) -> None:
    await asyncio.sleep(seconds)
    await asyncio.to_thread(server.thaw)


async def ready_after(client: Client, started: float, limit: float = 10.0) -> float:
    """Seconds from ``started`` until `/readyz` answers 200 (polled every 50 ms)."""
    while (await client.get("/readyz"))[0] != 200:
        assert time.monotonic() - started < limit, "the store did not recover by itself"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def told_store_down(reply: dict[str, Any]) -> bool:
    """The local API answers a turn whose history cannot load with an OpenAI-style 503 that
    carries the same words a chat platform shows."""
    error = (reply.get("body") or {}).get("error") or {}
    return bool(
        reply["status"] == 503
        and error.get("code") == "store_unavailable"
        and error.get("message") == STORE_DOWN
    )


async def test_a_stopped_server_loses_no_message_and_the_store_recovers_by_itself(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, own_pg: ThrowawayPostgres
) -> None:
    """Before: asyncpg's FileNotFoundError / ConnectionRefusedError escaped the store unwrapped,
    so `submit` raised: a Telegram message was dropped with no answer (`update_failed`) and
    the chat API answered 500; `/readyz` said ready throughout. Telegram updates that arrive
    while the server is down stay with Telegram (not confirmed) and are answered, and stored,
    once it is back; the chat API, which nobody redelivers, is answered at once."""
    section = {"enabled": True, "token": TOKEN, "base_url": tg.api_url, "allow_all": True}
    section["base_file_url"] = tg.file_url
    config = make_config(
        tmp_path, fake_llm.base_url, store={"url": own_pg.url}, platforms={"telegram": section}
    )
    async with running_gateway(config) as (gw, client):
        tg.send_text(555, "before")
        await tg.wait_sent(1, chat_id=555)
        with capture_logs() as logs:
            await asyncio.to_thread(own_pg.stop)
            tg.send_text(555, "known session, server down")
            tg.send_text(777, "new session, server down")
            api = await client.chat("api, server down", user="bob")  # its history cannot load
            ping = time.monotonic()
            health, _ = await client.get("/healthz")
            ping_s = time.monotonic() - ping
            ready, why = await client.get("/readyz")
            await asyncio.sleep(1.5)  # poll rounds: none may confirm the updates
            held = [u["message"]["text"] for u in tg.pending_updates]
            await asyncio.to_thread(own_pg.start)
            recovered_s = await ready_after(client, time.monotonic())
            [known] = (await tg.wait_sent(2, chat_id=555, timeout=15))[1:]
            [new] = await tg.wait_sent(1, chat_id=777, timeout=15)
            tg.send_text(555, "after")
            after = (await tg.wait_sent(3, chat_id=555))[2]
            history = [m["content"] for m in await gw.store.history("telegram:dm:555")]
    assert held == ["known session, server down", "new session, server down"]
    assert known["text"] == "echo: known session, server down"
    assert new["text"] == "echo: new session, server down"
    assert told_store_down(api)
    assert health == 200 and ping_s < 0.5
    assert ready == 503 and why["reasons"][0].startswith("store: database unreachable")
    assert recovered_s < 3  # the probe closes the circuit: no write fails long after
    assert after["text"] == "echo: after"
    # the updates held by Telegram were stored once taken: nothing missing or half-written
    assert history == [
        "before",
        "echo: before",
        "known session, server down",
        "echo: known session, server down",
        "after",
        "echo: after",
    ]
    events = [e["event"] for e in logs]
    assert events.count("store.unreachable") == 1 and events.count("store.recovered") == 1
    assert SILENT.isdisjoint(events), [e for e in logs if e["event"] in SILENT]


async def test_a_server_gone_silent_holds_no_answer_and_the_store_recovers_by_itself(
    tmp_path: Path, fake_llm: FakeOpenAI, own_pg: ThrowawayPostgres
) -> None:
    """A server that stops answering (a hung host, a partition: SIGSTOP here) for longer than
    asyncpg's connect timeout. Before: a pooled connection's ping had no timeout at all, so the
    first write hung for the whole outage and every other one queued behind it: nobody got an
    answer until the server came back, and `/readyz` said ready."""
    config = make_config(tmp_path, fake_llm.base_url, store={"url": own_pg.url})
    outage = CONNECT_TIMEOUT_S + 2
    async with running_gateway(config) as (gw, client):
        assert (await client.chat("before"))["text"] == "echo: before"
        with capture_logs() as logs:
            await asyncio.to_thread(own_pg.freeze)
            frozen = time.monotonic()
            # on a timer, not after the answers: without the fix they come only once it thaws
            thaw = asyncio.create_task(thaw_after(own_pg, outage))
            known, new = await asyncio.gather(
                client.chat("known session, server silent"), client.chat("new one", user="bob")
            )
            answered_s = time.monotonic() - frozen
            ping = time.monotonic()
            health, _ = await client.get("/healthz")
            ping_s = time.monotonic() - ping
            ready, why = await client.get("/readyz")
            later = await client.chat("later in the outage", user="carol")
            later_s = time.monotonic() - ping
            await thaw
            recovered_s = await ready_after(client, time.monotonic())
            after = await client.chat("after")
            history = [m["content"] for m in await gw.store.history("api:dm:alice")]
    assert answered_s < 8, f"the first answers took {answered_s:.1f} s"  # hung until thawed
    assert known["text"] == "echo: known session, server silent"
    assert told_store_down(new) and told_store_down(later)
    assert later_s < 1, f"an answer during the outage took {later_s:.1f} s"
    assert health == 200 and ping_s < 0.5
    assert ready == 503 and why["reasons"][0].startswith("store: database unreachable")
    assert recovered_s < 3
    assert after["text"] == "echo: after"
    assert history == ["before", "echo: before", "after", "echo: after"]
    events = [e["event"] for e in logs]
    assert events.count("store.unreachable") == 1 and events.count("store.recovered") == 1
    assert SILENT.isdisjoint(events)
