"""The schema has a revision: a database made by any older release (before revisions, or at an
earlier revision) reaches the head when the store opens it, keeps its rows, matches today's
models, and is not changed again on the next open; one from a newer release is refused; several
openers of one fresh database do not race; `hermes db current|upgrade` report it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, text
from structlog.testing import capture_logs

from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent
from hermes_gateway.store import migrate as store_migrate
from hermes_gateway.store.migrate import head
from hermes_gateway.store.sqlite import sqlite_pragmas
from hermes_gateway.store.store import Store
from tests.harness import dm
from tests.store_schemas import RELEASES, WORDS, make_release, on, schema_diff

UNVERSIONED = "unversioned (made by a release before revisions)"

# The inbox exactly as the release before `parts_sent` and `preview` created it (alone: the
# other tables of that release are made at open too).
OLD_INBOX = """
CREATE TABLE inbox (
    id INTEGER NOT NULL,
    platform VARCHAR(32) NOT NULL,
    chat_id VARCHAR(128) NOT NULL,
    message_id VARCHAR(128) NOT NULL,
    session_key VARCHAR(512) NOT NULL,
    payload TEXT NOT NULL,
    status VARCHAR(16) NOT NULL,
    accepted_at FLOAT NOT NULL,
    updated_at FLOAT NOT NULL,
    run_id VARCHAR(64) NOT NULL,
    reply TEXT,
    PRIMARY KEY (id),
    CONSTRAINT uq_inbox_message UNIQUE (platform, chat_id, message_id)
);
CREATE INDEX ix_inbox_status ON inbox (status);
"""


def event(message_id: str) -> MessageEvent:
    return dm(message_id, f"message {message_id}")


INSERT_OLD_ROW = (
    "INSERT INTO inbox (platform, chat_id, message_id, session_key, payload, status, "
    "accepted_at, updated_at, run_id, reply) VALUES "
)


def old_row() -> tuple[object, ...]:
    """A reply that was stored, never sent."""
    now, payload = time.time(), json.dumps(asdict(event("1")))
    return ("telegram", "555", "1", "telegram:dm:555", payload, "done", now, now, "run1", "reply")


def old_database(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(OLD_INBOX)
        db.execute(INSERT_OLD_ROW + "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", old_row())
        db.commit()


async def test_an_old_sqlite_database_gets_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old_database(path)
    await check_upgrade(f"sqlite+aiosqlite:///{path}")


async def check_upgrade(url: str) -> None:
    """Open an old-schema database holding `old_row`: the columns are added with their
    defaults, everything works on them, and a second open changes nothing."""
    store = Store(url)
    with capture_logs() as logs:
        await store.open()
    try:
        assert migrations(logs) == [(UNVERSIONED, head())]
        assert await on(url, schema_diff) == []
        to_run, [left] = await store.replayable(3600)
        assert to_run == []
        assert (left.reply, left.parts_sent) == ("reply", 0)  # the default
        await store.progress([left.inbox_id], 1)
        await store.remember_preview(event("1"), "42")
        fresh = await store.accept(event("2"))  # the fast path's insert still fits
        assert fresh is not None
        for _ in range(2):  # counted on the new columns, from their defaults
            await store.begin_attempt([fresh, left.inbox_id], probation=True)
            held = await store.quarantine(2, 3600)
        assert [q.inbox_id for q in held] == [fresh]
        assert await store.previews([left.inbox_id]) == {left.inbox_id: "42"}
        assert [u.parts_sent for u in (await store.replayable(3600))[1]] == [1]
    finally:
        await store.close()
    again = Store(url)
    with capture_logs() as logs:
        await again.open()  # at the head: nothing to do
    await again.close()
    assert migrations(logs) == []


def migrations(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["before"], e["after"]) for e in logs if e["event"] == "store.migrated"]


async def check_release_upgrade(url: str, release: int) -> None:
    """A database as ``release`` left it (`make_release`) reaches the head on open: its unsent
    reply is replayed, its conversation continues and is found by search (indexed when the
    search revision made the index on a database that already held it)."""
    await on(url, make_release, release)
    store = Store(url)
    with capture_logs() as logs:
        await store.open()
    try:
        assert migrations(logs) == [(UNVERSIONED, head())]
        assert await on(url, schema_diff) == []
        to_run, [left] = await store.replayable(3600)
        assert (to_run, left.reply, left.parts_sent) == ([], "reply", 0)
        history = await store.history("telegram:dm:555")
        assert [m["content"] for m in history] == [WORDS, "noted"]
        await store.complete_turn(
            "telegram:dm:555", [{"role": "user", "content": "a whale"}], [], "", "r"
        )
        assert len(await store.search_messages("telegram:dm:555", "whale")) == 2
        fresh = await store.accept(event("2"))
        assert fresh is not None
        for _ in range(2):
            await store.begin_attempt([fresh], probation=True)
            held = await store.quarantine(2, 3600)
        assert [q.inbox_id for q in held] == [fresh]
    finally:
        await store.close()
    assert await on(url, revision) == head()


async def check_revision_upgrade(url: str, rev: str) -> None:
    """A database at an earlier revision (made by a release with revisions) reaches the head."""
    await store_migrate.run(url, {}, lambda conn: command.upgrade(store_migrate._config(conn), rev))
    assert await on(url, revision) == rev
    store = Store(url)
    with capture_logs() as logs:
        await store.open()
    await store.close()
    assert migrations(logs) == [(rev, head())]
    assert await on(url, schema_diff) == []


async def check_concurrent_opens(url: str) -> None:
    """Several gateways opening one fresh database at once: one migrates it, the others wait
    for it and find the head; all of them work."""
    stores = [Store(url) for _ in range(4)]
    with capture_logs() as logs:
        await asyncio.gather(*(s.open() for s in stores))
    try:
        assert migrations(logs) == [("empty", head())]
        assert await on(url, schema_diff) == []  # the revisions make what the models say
        ids = [await s.accept(event(str(i))) for i, s in enumerate(stores)]
        assert None not in ids and len(set(ids)) == 4
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def check_newer_release_refused(url: str) -> None:
    """A database a newer release upgraded is left alone, with a message saying why."""
    store = Store(url)
    await store.open()
    await store.close()
    await on(url, lambda conn: conn.execute(text("UPDATE alembic_version SET version_num = 'r99'")))
    with pytest.raises(StoreError, match="revision r99, which this release does not know"):
        await Store(url).open()


def revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"


@pytest.mark.parametrize("release", range(len(RELEASES)), ids=RELEASES)
async def test_a_database_of_each_older_release_reaches_the_head(
    tmp_path: Path, release: int
) -> None:
    await check_release_upgrade(sqlite_url(tmp_path), release)


@pytest.mark.parametrize("rev", ["r01", "r02", "r03", "r04", "r05", "r06", "r07", "r08", "r09"])
async def test_a_database_at_each_earlier_revision_reaches_the_head(
    tmp_path: Path, rev: str
) -> None:
    await check_revision_upgrade(sqlite_url(tmp_path), rev)


async def test_concurrent_opens_of_one_fresh_database_do_not_race(tmp_path: Path) -> None:
    await check_concurrent_opens(sqlite_url(tmp_path))


async def test_an_open_waits_while_another_opener_holds_a_fresh_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite refuses the switch of a fresh file to WAL at once, without waiting out the busy
    timeout, while another connection holds its write lock (as a second opener does): the open
    tries again until the lock is gone, then migrates."""
    tries = []

    def counted(dbapi_conn: Any, record: Any) -> None:
        tries.append(1)
        sqlite_pragmas(dbapi_conn, record)

    monkeypatch.setattr(store_migrate, "sqlite_pragmas", counted)
    other = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    store = Store(sqlite_url(tmp_path))
    opening = asyncio.create_task(store.open())
    while len(tries) < 2 and not opening.done():  # refused once, trying again
        await asyncio.sleep(0.01)
    other.execute("COMMIT")
    other.close()
    await opening
    try:
        assert len(tries) >= 2
        assert await on(sqlite_url(tmp_path), revision) == head()
    finally:
        await store.close()


async def test_a_database_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    await check_newer_release_refused(sqlite_url(tmp_path))


def hermes_db(home: Path, action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_gateway", "db", action],
        env={**os.environ, "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hermes_db_current_and_upgrade(tmp_path: Path) -> None:
    """An operator sees the revision, upgrades an older database, and upgrading again is a
    no-op; the store's URL is printed without its password."""
    nothing = hermes_db(tmp_path, "current")
    assert "revision: none (no database file yet" in nothing.stdout, nothing.stderr
    assert not (tmp_path / "state.db").exists()  # looking made no database
    asyncio.run(on(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}", make_release, 0))
    current = hermes_db(tmp_path, "current")
    assert current.returncode == 0, current.stderr
    assert f"revision: {UNVERSIONED}\nhead:     {head()}\n" in current.stdout
    assert "run `hermes db upgrade`" in current.stdout
    upgraded = hermes_db(tmp_path, "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"upgraded from {UNVERSIONED} to {head()}" in upgraded.stdout
    again = hermes_db(tmp_path, "upgrade")
    assert f"already at {head()}, nothing to do" in again.stdout
    current = hermes_db(tmp_path, "current")
    assert f"revision: {head()}\nhead:     {head()}\n" in current.stdout
    assert "hermes db upgrade" not in current.stdout


async def test_an_in_memory_database_is_migrated_on_its_own_connection() -> None:
    store = Store("sqlite+aiosqlite:///:memory:")
    await store.open()
    try:
        inbox_id = await store.accept(event("1"))
        await store.complete_turn(
            "telegram:dm:555", [{"role": "user", "content": "hi"}], [], "", "r"
        )
        assert inbox_id is not None and len(await store.history("telegram:dm:555")) == 1
    finally:
        await store.close()


def test_the_head_constant_is_alembics_head() -> None:
    from hermes_gateway.store.migrations import HEAD

    assert head() == HEAD  # a new revision must move HEAD too


def test_opening_a_new_or_current_database_does_not_load_alembic(tmp_path: Path) -> None:
    """Alembic costs 11 MB and startup time; only an older database needs it."""
    script = (
        "import asyncio, sys\n"
        "from hermes_gateway.store.store import Store\n"
        "async def main(url):\n"
        "    store = Store(url); await store.open(); await store.close()\n"
        "asyncio.run(main(sys.argv[1]))\n"
        "print('alembic' in sys.modules)\n"
    )
    url = f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"
    runs = [
        subprocess.run(
            [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60
        )
        for _ in range(2)
    ]
    assert [r.stdout.split()[-1] for r in runs] == ["False", "False"], [r.stderr for r in runs]


def _objects(conn: Connection) -> set[tuple[str, str]]:
    rows = conn.exec_driver_sql(
        "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    )
    return {(str(t), str(n)) for t, n in rows}


async def test_a_new_database_made_in_one_step_equals_one_the_revisions_built(
    tmp_path: Path,
) -> None:
    """A new database skips Alembic (its schema made at once and the head stamped): it must
    be the database the revisions r01..head would have built, search index and stamp included."""
    one_step = f"sqlite+aiosqlite:///{tmp_path / 'one.db'}"
    store = Store(one_step)
    await store.open()
    await store.close()
    by_revisions = f"sqlite+aiosqlite:///{tmp_path / 'revisions.db'}"

    def build(conn: Connection) -> None:
        config = store_migrate._config(conn)
        command.upgrade(config, "head")

    await on(by_revisions, build)
    assert await on(one_step, schema_diff) == []
    assert await on(one_step, _objects) == await on(by_revisions, _objects)
    assert await on(one_step, store_migrate._stamped) == store_migrate.HEAD
    store = Store(one_step)
    await store.open()
    try:  # the search index works on it
        accepted = await store.accept(event("1"))
        assert accepted is not None
    finally:
        await store.close()
