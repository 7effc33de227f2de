"""The store on PostgreSQL (asyncpg) by URL: the same behaviour as on SQLite.

CI starts a throwaway PostgreSQL listening on a Unix socket only (see .ci/run) and names it in
HERMES_TEST_POSTGRES; a socket file is reachable from inside the loopback-only namespace.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.pairing import PairingBook
from hermes_gateway.store.engine import StoreEngine
from hermes_gateway.store.store import Store
from tests.fakes.openai import FakeOpenAI, text
from tests.harness import make_config, running_gateway
from tests.hermes_gateway.store.test_store_migration import (
    INSERT_OLD_ROW,
    OLD_INBOX,
    check_upgrade,
    old_row,
)

SERVER = os.environ.get("HERMES_TEST_POSTGRES", "")  # e.g. hermes@/?host=/tmp/hermes-pg
pytestmark = pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)")


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    import asyncpg

    user, _, rest = SERVER.partition("@")
    host = rest.split("host=", 1)[1]
    name = f"hermes_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(user=user, host=host, database="postgres")
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql+asyncpg://{user}@/{name}?host={host}"
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()


def event(i: int, chat: str = "c1") -> MessageEvent:
    return MessageEvent.create(
        platform="telegram",
        chat_type="dm",
        chat_id=chat,
        user_id=chat,
        message_id=str(i),
        text=f"message {i}",
    )


async def test_inbox_turns_and_replay(pg_url: str) -> None:
    store = Store(pg_url)
    await store.open()
    try:
        first = await store.accept(event(1))
        assert first is not None
        assert await store.accept(event(1)) is None  # a redelivery is folded
        second = await store.accept(event(2))
        assert second is not None
        key = event(1).session_key
        turn = [
            {"role": "user", "content": "message 1"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
            {"role": "assistant", "content": "done"},
        ]
        await store.complete_turn(key, turn, [first], "done", "run1")
        assert await store.history(key) == turn
        to_run, to_send = await store.replayable(3600)
        assert [i for i, _ in to_run] == [second]
        assert [(u.inbox_id, u.reply) for u in to_send] == [(first, "done")]
        await store.mark([first], "answered")
        assert [u.inbox_id for u in (await store.replayable(3600))[1]] == []
        await store.reset_session(key)
        assert await store.history(key) == []
        book = PairingBook(store)
        request = await book.request("telegram", "9", "zoe", "9")
        assert request is not None
        await book.approve("telegram", request.code)
        fresh = PairingBook(store)
        await fresh.load()
        assert fresh.is_approved("telegram", "9")
    finally:
        await store.close()


async def test_the_gateway_runs_on_postgres(
    tmp_path: Path, pg_url: str, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("stored in postgres"))
    config = make_config(tmp_path, fake_llm.base_url, store={"url": pg_url})
    async with running_gateway(config) as (gw, client):
        reply = await client.chat("hello")
    assert reply["text"] == "stored in postgres"
    async with running_gateway(config) as (gw, client):  # a restart reads it back
        history = await client.history()
    assert [m["content"] for m in history] == ["hello", "stored in postgres"]


async def test_an_old_database_gets_the_new_columns(pg_url: str) -> None:
    import asyncpg

    dsn = pg_url.replace("postgresql+asyncpg", "postgresql")
    db = await asyncpg.connect(dsn)
    try:
        await db.execute(OLD_INBOX.replace("id INTEGER NOT NULL", "id SERIAL NOT NULL"))
        await db.execute(INSERT_OLD_ROW + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)", *old_row())
    finally:
        await db.close()
    await check_upgrade(pg_url)


async def test_a_lock_held_elsewhere_fails_writes_in_time_instead_of_stalling_them(
    pg_url: str, fake_llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding a lock on the inbox stalled every write for as long as it held
    it (PostgreSQL waits for a lock forever by default): no user got an answer. Now a write
    waits `lock_wait_s`, fails, and the user is answered; once the lock goes, writes resume."""
    import asyncpg

    monkeypatch.setattr(StoreEngine, "lock_wait_s", 0.5)
    config = make_config(tmp_path, fake_llm.base_url, store={"url": pg_url})
    dsn = pg_url.replace("postgresql+asyncpg://", "postgresql://")
    async with running_gateway(config) as (gw, client):
        assert (await client.chat("before"))["text"] == "echo: before"
        locker = await asyncpg.connect(dsn)
        tx = locker.transaction()
        await tx.start()
        await locker.execute("LOCK TABLE inbox IN EXCLUSIVE MODE")  # reads go on, writes wait
        try:
            reply = await asyncio.wait_for(client.chat("while locked"), 15)
        finally:
            await tx.rollback()
            await locker.close()
        assert reply["text"] == "echo: while locked"
        assert (await client.chat("after"))["text"] == "echo: after"
        history = [m["content"] for m in await gw.store.history("api:dm:alice")]
    assert "before" in history and "after" in history


async def test_connections_killed_by_the_server_are_replaced(
    pg_url: str, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A PostgreSQL restart or failover drops the pooled connections: the next message must be
    stored on a fresh one, not fail on a dead one."""
    import asyncpg

    config = make_config(tmp_path, fake_llm.base_url, store={"url": pg_url})
    dsn = pg_url.replace("postgresql+asyncpg://", "postgresql://")
    async with running_gateway(config) as (gw, client):
        assert (await client.chat("one"))["text"] == "echo: one"
        admin = await asyncpg.connect(dsn)
        try:
            # the answer reached the client before its entry is marked answered: the restart
            # comes between messages, with the pool at rest, not in that write
            while await admin.fetchval("SELECT status FROM inbox") != "answered":
                await asyncio.sleep(0.02)
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        assert killed >= 1
        assert (await client.chat("two"))["text"] == "echo: two"
        history = [m["content"] for m in await gw.store.history("api:dm:alice")]
        admin = await asyncpg.connect(dsn)
        try:  # both in the inbox, settled: no write was lost to a dead connection
            statuses = [r[0] for r in await admin.fetch("SELECT status FROM inbox ORDER BY id")]
        finally:
            await admin.close()
    assert history == ["one", "echo: one", "two", "echo: two"]
    assert statuses == ["answered", "answered"]
