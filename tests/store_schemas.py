"""The store's schema as each release before revisions made it (`create_all` on that release's
models, then its search index), with the rows such a database holds, on SQLite or PostgreSQL;
and the check that a database matches today's models."""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.ext.asyncio import create_async_engine

from hermes_gateway.store.models import Base
from tests.harness import dm

# each release that changed the schema, oldest first (the revision that reproduces it)
RELEASES = ("first", "pairing", "search", "resume", "attempts")
WORDS = "the blue whale sings at dawn"
_FTS = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content, content='messages', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_ai AFTER INSERT ON messages "
    "WHEN new.role IN ('user', 'assistant') AND new.content IS NOT NULL BEGIN "
    "INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_ad AFTER DELETE ON messages "
    "WHEN old.role IN ('user', 'assistant') AND old.content IS NOT NULL BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, "
    "old.content); END",
    "INSERT INTO messages_fts(rowid, content) SELECT id, content FROM messages "
    "WHERE role IN ('user', 'assistant') AND content IS NOT NULL",
]
_GIN = (
    "CREATE INDEX IF NOT EXISTS ix_messages_fts ON messages "
    "USING gin (to_tsvector('simple', coalesce(content, '')))"
)


def _tables(release: int) -> MetaData:
    """That release's models, as `create_all` saw them."""
    meta = MetaData()
    Table(
        "sessions",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("key", String(512), index=True, nullable=False),
        Column("created_at", Float, nullable=False),
        Column("closed_at", Float),
    )
    Table(
        "messages",
        meta,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("session_id", ForeignKey("sessions.id"), index=True, nullable=False),
        Column("role", String(16), nullable=False),
        Column("content", Text),
        Column("tool_calls", Text),
        Column("tool_call_id", String(128)),
        Column("run_id", String(64), nullable=False),
        Column("created_at", Float, nullable=False),
    )
    inbox = [
        Column("id", Integer, primary_key=True, autoincrement=True),
        *(Column(name, String(n), nullable=False) for name, n in _INBOX_STRINGS),
        Column("payload", Text, nullable=False),
        Column("status", String(16), nullable=False),
        Column("accepted_at", Float, nullable=False),
        Column("updated_at", Float, nullable=False),
        Column("run_id", String(64), nullable=False),
        Column("reply", Text),
    ]
    if release >= RELEASES.index("resume"):
        inbox.append(Column("parts_sent", Integer, nullable=False, server_default=text("0")))
        inbox.append(Column("preview", String(128)))
    if release >= RELEASES.index("attempts"):
        inbox.append(Column("attempts", Integer, nullable=False, server_default=text("0")))
    Table(
        "inbox",
        meta,
        *inbox,
        UniqueConstraint("platform", "chat_id", "message_id", name="uq_inbox_message"),
        Index("ix_inbox_status", "status"),
    )
    if release >= RELEASES.index("pairing"):
        Table(
            "pairing",
            meta,
            Column("id", Integer, primary_key=True, autoincrement=True),
            *(Column(name, String(n), nullable=False) for name, n in _PAIRING_STRINGS),
            Column("created_at", Float, nullable=False),
            Column("approved_at", Float),
            UniqueConstraint("platform", "user_id", name="uq_pairing_user"),
        )
    return meta


_INBOX_STRINGS = (("platform", 32), ("chat_id", 128), ("message_id", 128), ("session_key", 512))
_PAIRING_STRINGS = (
    ("platform", 32),
    ("user_id", 128),
    ("user_name", 256),
    ("chat_id", 128),
    ("code", 16),
    ("status", 16),
)


def make_release(conn: Connection, release: int) -> None:
    """The database release ``release`` left: its schema, a conversation, an unsent reply."""
    _tables(release).create_all(conn)
    if release >= RELEASES.index("search"):
        for ddl in _FTS if conn.dialect.name == "sqlite" else [_GIN]:
            conn.execute(text(ddl))
    now = time.time()
    conn.execute(
        text("INSERT INTO sessions (key, created_at) VALUES ('telegram:dm:555', :t)"), {"t": now}
    )
    for role, content in (("user", WORDS), ("assistant", "noted")):
        conn.execute(
            text(
                "INSERT INTO messages (session_id, role, content, run_id, created_at) "
                "VALUES (1, :role, :content, 'run0', :t)"
            ),
            {"role": role, "content": content, "t": now},
        )
    payload = json.dumps(asdict(dm("1", "message 1")))
    conn.execute(
        text(
            "INSERT INTO inbox (platform, chat_id, message_id, session_key, payload, status, "
            "accepted_at, updated_at, run_id, reply) VALUES ('telegram', '555', '1', "
            "'telegram:dm:555', :payload, 'done', :t, :t, 'run1', 'reply')"
        ),
        {"payload": payload, "t": now},
    )


async def on(url: str, fn: Any, *args: Any) -> Any:
    """``fn(connection, *args)`` in one transaction on ``url``."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(fn, *args)
    finally:
        await engine.dispose()


def schema_diff(conn: Connection) -> list[Any]:
    """How the database differs from today's models (the search indexes are not in them)."""
    unmodelled = (
        "messages_fts",
        "alembic_version",
        "ix_messages_fts",
        "memories_fts",
        "fts_document",
        "embedding_vec",  # pgvector's column, where the server has the extension
    )

    def modelled(name: str | None, kind: str, _parent: Any) -> bool:
        return not (name or "").startswith((*unmodelled, "ix_memories_fts", "ix_memories_vec"))

    context = MigrationContext.configure(conn, opts={"include_name": modelled})
    with warnings.catch_warnings():  # SQLAlchemy does not know pgvector's type (not modelled)
        warnings.filterwarnings("ignore", "Did not recognize type 'vector'")
        return list(compare_metadata(context, Base.metadata))
