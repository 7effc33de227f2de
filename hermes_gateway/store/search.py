"""Full-text search over stored messages (the `session_search` tool).

SQLite: an FTS5 table over `messages` (external content), kept in sync by triggers, so the
owned SQLite writer (`sqlite.py`) needs no change. PostgreSQL: a GIN index on each
message's `tsvector` ('simple' configuration: no stemming, any language). Both are made by the
migration `migrations/versions/r03_search.py` (which keeps its own frozen copy of this DDL),
or at once for a new database (`INDEX_DDL`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text


@dataclass(frozen=True, slots=True)
class Hit:
    """A message found by `Store.search_messages`."""

    created_at: float
    role: str
    snippet: str
    current: bool  # in the session's open conversation


WORD = re.compile(r"\w+")
_SEARCHABLE = "('user', 'assistant')"
_PG_TSV = "to_tsvector('simple', coalesce(m.content, ''))"
# the search index as the newest schema has it, for a database made in one step
INDEX_DDL = {
    "sqlite": [
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', "
        "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
        "CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages "
        f"WHEN new.role IN {_SEARCHABLE} AND new.content IS NOT NULL BEGIN "
        "INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content); END",
        "CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages "
        f"WHEN old.role IN {_SEARCHABLE} AND old.content IS NOT NULL BEGIN "
        "INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, "
        "old.content); END",
    ],
    "postgresql": [
        "CREATE INDEX ix_messages_fts ON messages "
        "USING gin (to_tsvector('simple', coalesce(content, '')))"
    ],
}


def search_statement(
    sqlite: bool, words: list[str], mode: str, user_id: str | None = None
) -> tuple[Any, dict[str, Any]]:
    """``user_id`` set: only the messages of that user's turns."""
    mine = "" if user_id is None else " AND m.user_id = :user"
    params: dict[str, Any] = {} if user_id is None else {"user": user_id}
    if sqlite:
        joiner = " " if mode == "all" else " OR "
        match = joiner.join('"' + w.replace('"', "") + '"*' for w in words)  # prefixes match
        stmt = text(
            "SELECT m.created_at, m.role, "
            "snippet(messages_fts, 0, '[', ']', ' … ', 24), s.closed_at IS NULL "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "JOIN sessions s ON s.id = m.session_id "
            f"WHERE messages_fts MATCH :q AND s.key = :key{mine} "
            "ORDER BY bm25(messages_fts) LIMIT :limit"
        )
        return stmt, {"q": match, **params}
    tsquery = (" & " if mode == "all" else " | ").join(f"{w.lower()}:*" for w in words)
    stmt = text(
        "SELECT m.created_at, m.role, ts_headline('simple', m.content, q, "
        "'StartSel=[, StopSel=], MaxWords=30, MinWords=12'), s.closed_at IS NULL "
        "FROM messages m JOIN sessions s ON s.id = m.session_id, "
        "to_tsquery('simple', :q) q "
        f"WHERE s.key = :key{mine} AND m.role IN {_SEARCHABLE} AND {_PG_TSV} @@ q "
        f"ORDER BY ts_rank({_PG_TSV}, q) DESC, m.id DESC LIMIT :limit"
    )
    return stmt, {"q": tsquery, **params}
