"""The long-term memory archive (`memories`, with its keyword index: an FTS5 table on SQLite, a
generated tsvector column and its GIN index on PostgreSQL), and whose turn each
stored message is (`messages.user_id`, so a shared session's search shows each user only theirs).

Revision ID: r07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "r07"
down_revision = "r06"
branch_labels = None
depends_on = None

# frozen here as this revision made them: the archive's queries may change, this may not
_SQLITE_FTS = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(content, context, tags, "
    "content='memories', content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, content, context, tags) "
    "VALUES (new.id, new.content, new.context, new.tags); END",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_ad AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts(memories_fts, rowid, content, context, tags) "
    "VALUES ('delete', old.id, old.content, old.context, old.tags); END",
]
_PG_FTS = [
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS fts_document tsvector GENERATED ALWAYS AS "
    "(to_tsvector('simple', content || ' ' || context || ' ' || tags)) STORED",
    "CREATE INDEX IF NOT EXISTS ix_memories_fts ON memories USING gin (fts_document)",
]


def _text(name: str, length: int | None = None) -> sa.Column[str]:
    kind: sa.types.TypeEngine[str] = sa.String(length) if length else sa.Text()
    return sa.Column(name, kind, nullable=False, server_default="")


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    if "user_id" not in {c["name"] for c in inspector.get_columns("messages")}:
        op.add_column("messages", _text("user_id", 128))
    if not inspector.has_table("memories"):
        op.create_table(
            "memories",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("bank", sa.String(256), nullable=False),
            sa.Column("content", sa.Text(), nullable=False),
            _text("context"),
            _text("tags"),
            _text("session_key", 512),
            _text("message_id", 128),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("embedding", sa.LargeBinary(), nullable=True),
            _text("model", 128),
        )
        op.create_index("ix_memories_bank", "memories", ["bank", "id"])
    if bind.dialect.name == "sqlite":
        for ddl in _SQLITE_FTS:
            op.execute(ddl)
    else:
        for ddl in _PG_FTS:
            op.execute(ddl)
