"""Full-text search over messages: SQLite's FTS5 table fed by triggers (filled from the rows
already there), PostgreSQL's GIN index on each message's tsvector.

Revision ID: r03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r03"
down_revision = "r02"
branch_labels = None
depends_on = None

_SEARCHABLE = "('user', 'assistant')"
# frozen here as this revision made them: the store's queries may change, this may not
_SQLITE_FTS = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content, content='messages', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_ai AFTER INSERT ON messages "
    f"WHEN new.role IN {_SEARCHABLE} AND new.content IS NOT NULL BEGIN "
    "INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER IF NOT EXISTS messages_fts_ad AFTER DELETE ON messages "
    f"WHEN old.role IN {_SEARCHABLE} AND old.content IS NOT NULL BEGIN "
    "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, "
    "old.content); END",
]
_FILL = (
    "INSERT INTO messages_fts(rowid, content) SELECT id, content FROM messages "
    f"WHERE role IN {_SEARCHABLE} AND content IS NOT NULL"
)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.execute(
            "CREATE INDEX IF NOT EXISTS ix_messages_fts ON messages "
            "USING gin (to_tsvector('simple', coalesce(content, '')))"
        )
        return
    fresh = not sa.inspect(bind).has_table("messages_fts")
    for ddl in _SQLITE_FTS:
        op.execute(ddl)
    if fresh:
        op.execute(_FILL)
