"""A database made by an older release gets the columns added since (`parts_sent`, `preview`,
`attempts`) when the store opens it, keeps its rows, and is not changed again on the next open."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path

from structlog.testing import capture_logs

from hermes_gateway.events import MessageEvent
from hermes_gateway.store import Store
from tests.harness import dm

# The inbox exactly as the release before `parts_sent` and `preview` created it.
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
        added = [e["columns"] for e in logs if e["event"] == "store.columns_added"]
        assert added == [["inbox.parts_sent", "inbox.preview", "inbox.attempts"]]
        to_run, [left] = await store.replayable(3600)
        assert to_run == []
        assert (left.reply, left.parts_sent) == ("reply", 0)  # the default
        await store.progress([left.inbox_id], 1)
        await store.remember_preview(event("1"), "42")
        fresh = await store.accept(event("2"))  # the fast path's insert still fits
        assert fresh is not None
        for _ in range(2):  # counted on the new column, from its default
            await store.begin_attempt([fresh, left.inbox_id])
        assert [q.inbox_id for q in await store.quarantine(2, 3600)] == [fresh]
        assert await store.previews([left.inbox_id]) == {left.inbox_id: "42"}
        assert [u.parts_sent for u in (await store.replayable(3600))[1]] == [1]
    finally:
        await store.close()
    again = Store(url)
    with capture_logs() as logs:
        await again.open()  # idempotent: nothing left to add
    await again.close()
    assert [e for e in logs if e["event"] == "store.columns_added"] == []
