"""Accept means stored: an update is confirmed to its platform only once its inbox row is
written. `hermes gateway run` with its home on a real 8 MB tmpfs (its own mount namespace),
polling the fake Telegram: with the disk full, new updates stay with Telegram (the offset does
not move past them) and `/readyz` says "disk full"; once space is back the gateway resumes by
itself and answers each message once, across a restart. In the process: a read-only database
(Telegram polling and webhook, Slack Socket Mode) and a deleted database file."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.config import Config
from hermes_gateway.store.writes import cannot_write
from tests.e2e.daemon import free_port
from tests.fakes import openai as oa
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.harness import eventually, make_config, running_gateway
from tests.hostile.store_kit import (
    MountNamespace,
    NamespacedGateway,
    inbox,
    inbox_of,
    not_ready,
    read_only,
    reasons,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN, USER, OTHER = "123:ABC", 555, 556
BIG = "x" * 20_000  # needs fresh database pages: a full disk cannot take it


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[MountNamespace]:
    if shutil.which("nsenter") is None or shutil.which("unshare") is None:
        pytest.skip("needs unshare and nsenter")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("no mount namespace here: run inside `unshare -rn`")
    space = MountNamespace(tmp_path / "home", "8m")
    yield space
    space.close()


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def gateway_for(ns: MountNamespace, llm: FakeOpenAI, fake: FakeTelegram) -> NamespacedGateway:
    telegram = {
        "enabled": True,
        "token": TOKEN,
        "base_url": fake.api_url,
        "base_file_url": fake.file_url,
        "allowed_users": [USER, OTHER],
        "streaming": False,
    }
    config = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "platforms": {"telegram": telegram},
    }
    return NamespacedGateway(ns, config)


def replies(fake: FakeTelegram, chat: int = USER) -> list[str]:
    return [m["text"] for m in fake.messages_to(chat)]


def pending_texts(fake: FakeTelegram) -> list[str]:
    return [u.get("message", {}).get("text", "") for u in fake.pending_updates]


def test_a_full_disk_leaves_updates_with_telegram_and_recovers_by_itself(
    ns: MountNamespace, fake_llm: FakeOpenAI, tg: FakeTelegram, tmp_path: Path
) -> None:
    ns_copy = tmp_path / "copy.db"
    gateway = gateway_for(ns, fake_llm, tg)
    try:
        gateway.start()
        wait_until(lambda: gateway.readyz()[0] == 200, timeout=20)
        tg.send_text(USER, "before")
        wait_until(lambda: "echo: before" in replies(tg), timeout=15)
        # accepted (offset confirmed) before the disk fills, answered after it is full
        fake_llm.push(oa.text("echo: slow", delay=2.0))
        tg.send_text(USER, "slow")
        wait_until(
            lambda: len(fake_llm.requests) >= 2 and "slow" not in pending_texts(tg), timeout=15
        )
        filler = ns.fill()
        tg.send_text(USER, f"big {BIG}")  # needs new pages: its inbox write fails
        wait_until(lambda: gateway.readyz()[0] == 503, timeout=15)
        status, reasons = gateway.readyz()
        assert any(r.startswith("store: disk full") for r in reasons), reasons
        wait_until(lambda: "echo: slow" in replies(tg), timeout=15)
        tg.send_text(OTHER, "while full")
        time.sleep(1.5)  # several poll rounds: none may confirm them
        kept = pending_texts(tg)
        assert f"big {BIG}" in kept and "while full" in kept, kept
        assert gateway.readyz()[0] == 503
        filler.unlink()  # space is back: nobody restarts anything
        wait_until(lambda: gateway.readyz()[0] == 200, timeout=20)
        wait_until(lambda: "echo: while full" in replies(tg, OTHER), timeout=20)
        wait_until(lambda: any(r.startswith("echo: big x") for r in replies(tg)), timeout=20)
        assert tg.pending_updates == []
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(20) == 0
        gateway.start()  # a restart: nothing answered twice, nothing lost
        wait_until(lambda: gateway.readyz()[0] == 200, timeout=20)
        time.sleep(1.5)
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(20) == 0
    finally:
        gateway.kill()
    # the big answer goes out in several parts (4096 characters each), once
    first_parts = [r[:11] for r in replies(tg) if not r.startswith("xxx")]
    assert first_parts == ["echo: befor", "echo: slow", "echo: big x"], first_parts
    assert replies(tg, OTHER) == ["echo: while full"]
    stored = inbox(ns, ns_copy)
    assert [text for _, text in stored] == ["before", "slow", f"big {BIG}", "while full"]
    assert {status for status, _ in stored} == {"answered"}, stored
    # what was logged once space came back (lines written on the full disk may be lost)
    events = gateway.log_events()
    assert "telegram.intake_resumed" in {e["event"] for e in events}
    outages = [e["reason"] for e in events if e["event"] == "store.writable_again"]
    assert outages and set(outages) == {"disk full"}, outages


@pytest.fixture
def fast_tg(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTelegram]:
    monkeypatch.setattr(TelegramAdapter, "poll_timeout", 1.0)
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def in_process(tmp_path: Path, llm: FakeOpenAI, fake: FakeTelegram) -> Config:
    section = {"enabled": True, "token": TOKEN, "base_url": fake.api_url, "streaming": False}
    section |= {"base_file_url": fake.file_url, "allowed_users": [USER, OTHER]}
    return make_config(tmp_path, llm.base_url, platforms={"telegram": section})


async def test_a_read_only_database_leaves_updates_with_telegram_and_recovers_by_itself(
    tmp_path: Path, fake_llm: FakeOpenAI, fast_tg: FakeTelegram
) -> None:
    tg = fast_tg
    config = in_process(tmp_path, fake_llm, tg)
    async with running_gateway(config) as (gw, client):
        tg.send_text(USER, "before")
        await tg.wait_sent(1, chat_id=USER, timeout=10)
        fake_llm.push(oa.text("echo: slow", delay=1.5))
        tg.send_text(USER, "slow")  # accepted before the database turns read-only
        await eventually(lambda: len(fake_llm.requests) >= 2 and not tg.pending_updates)
        async with read_only(gw):
            tg.send_text(OTHER, "while read-only")
            why = await not_ready(client)
            await tg.wait_sent(2, chat_id=USER, timeout=10)  # "slow" is answered anyway
            await asyncio.sleep(1.5)  # poll rounds: none may confirm it
            kept = pending_texts(tg)
            still = await reasons(client)
        # nobody restarts anything: the probe finds the store writable again
        await eventually(lambda: tg.messages_to(OTHER), timeout=15)
        assert await reasons(client) == []
        await asyncio.sleep(0.5)  # the answered entry is settled once the store can write
    async with running_gateway(config) as (gw, client):  # a restart: nothing twice, none lost
        await asyncio.sleep(1.5)
    assert why[0].startswith("store: read-only"), why
    assert still and kept == ["while read-only"], (still, kept)
    assert replies(tg) == ["echo: before", "echo: slow"]
    assert replies(tg, OTHER) == ["echo: while read-only"]
    stored = inbox_of(config.home_path / "state.db")
    assert stored == [("answered", t) for t in ("before", "slow", "while read-only")]


async def test_a_deleted_database_file_stops_intake_and_says_so(
    tmp_path: Path, fake_llm: FakeOpenAI, fast_tg: FakeTelegram
) -> None:
    """Writes to a deleted file succeed, into a file no restart will read: the gateway stops
    taking updates and stays not ready until it is restarted (which opens a new database)."""
    tg = fast_tg
    config = in_process(tmp_path, fake_llm, tg)
    async with running_gateway(config) as (_, client):
        tg.send_text(USER, "before")
        await tg.wait_sent(1, chat_id=USER, timeout=10)
        (config.home_path / "state.db").unlink()
        why = await not_ready(client)
        tg.send_text(USER, "after the file went")
        await asyncio.sleep(2)
        kept = pending_texts(tg)
        still = await reasons(client)
    async with running_gateway(config):  # a new, empty database: the update is taken now
        await tg.wait_sent(2, chat_id=USER, timeout=10)
    assert why[0].startswith("store: database file deleted"), why
    assert kept == ["after the file went"]
    assert still and still[0].startswith("store: database file deleted"), still
    assert replies(tg) == ["echo: before", "echo: after the file went"]


async def test_slack_socket_mode_does_not_ack_an_event_the_store_could_not_take(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Slack delivers an unacked Socket Mode event again (``retry_attempt``): that one, after
    the store can write again, is stored and answered; the first one was never acked."""
    with FakeSlack() as slack:
        section = {"enabled": True, "bot_token": slack.bot_token, "app_token": slack.app_token}
        section |= {"api_base": slack.api_base, "allowed_users": ["U123"], "streaming": False}
        config = make_config(tmp_path, fake_llm.base_url, platforms={"slack": section})
        async with running_gateway(config) as (gw, client):
            await eventually(lambda: gw.adapters["slack"].health().ready)
            async with read_only(gw):
                payload = slack.send_message("while read-only", channel="D1")
                why = await not_ready(client)
                await asyncio.sleep(1)  # its intake ran long ago: the ack would be there
                acks_during = len(slack.acks)
            await eventually(lambda: gw.store.circuit.writable, timeout=15)
            slack.send_event(payload["event"], event_id=payload["event_id"], retry_attempt=1)
            await eventually(lambda: slack.messages_in("D1"), timeout=10)
            acks_after = len(slack.acks)
    assert why[0].startswith("store: read-only"), why
    assert acks_during == 0
    assert acks_after == 1  # the redelivery, once stored
    assert [m["text"] for m in slack.messages_in("D1")] == ["echo: while read-only"]
    assert inbox_of(config.home_path / "state.db") == [("answered", "while read-only")]


async def test_the_telegram_webhook_answers_503_while_the_store_cannot_write(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Telegram retries a webhook delivery that did not get a 2xx: the retry after the store
    can write again is stored and answered, once."""
    port = free_port()
    hook = f"http://127.0.0.1:{port}/telegram/webhook"
    with FakeTelegram(token=TOKEN, webhook_retry_delays=(0.2, 0.5, 2.0, 3.0, 3.0)) as tg:
        config = in_process(tmp_path, fake_llm, tg)
        section = config.platforms.telegram.model_copy(
            update={"mode": "webhook", "webhook_url": hook, "webhook_secret": "s3cret-value"}
        )
        config = config.model_copy(
            update={
                "control": config.control.model_copy(update={"port": port}),
                "platforms": config.platforms.model_copy(update={"telegram": section}),
            }
        )
        async with running_gateway(config) as (gw, client):
            await eventually(lambda: gw.adapters["telegram"].health().ready)
            async with read_only(gw):
                tg.send_text(USER, "while read-only")
                why = await not_ready(client)
                await eventually(lambda: len(tg.webhook_deliveries) >= 2)
            await tg.wait_sent(1, chat_id=USER, timeout=15)
            statuses = [d["status"] for d in tg.webhook_deliveries]
            await asyncio.sleep(0.5)
    assert why[0].startswith("store: read-only"), why
    assert statuses[0] == 503 and statuses[-1] == 200, statuses
    assert replies(tg) == ["echo: while read-only"]
    assert inbox_of(config.home_path / "state.db") == [("answered", "while read-only")]


class _PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__("ERROR")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (sqlite3.OperationalError("database or disk is full"), "disk full"),
        (sqlite3.OperationalError("attempt to write a readonly database"), "read-only"),
        (sqlite3.OperationalError("disk I/O error"), "I/O error"),
        (_PgError("53100"), "disk full"),  # PostgreSQL: could not extend file
        (_PgError("25006"), "read-only"),  # a hot standby, default_transaction_read_only
        (sqlite3.IntegrityError("UNIQUE constraint failed: inbox.message_id"), None),
        (sqlite3.OperationalError("database is locked"), None),  # the circuit's "stuck"
        (_PgError("08006"), None),  # unreachable: the circuit's probe
    ],
)
def test_what_counts_as_cannot_write(exc: BaseException, reason: str | None) -> None:
    assert cannot_write(exc) == reason
