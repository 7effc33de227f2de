"""Full-text search over stored messages (the `session_search` tool).

SQLite: an FTS5 table over `messages` (external content), kept in sync by triggers, so the
SQLite fast write path (`store_sqlite`) needs no change. PostgreSQL: a GIN index on each
message's `tsvector` ('simple' configuration: no stemming, any language). Both are made by the
migration `migrations/versions/r03_search.py`.
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


def search_statement(sqlite: bool, words: list[str], mode: str) -> tuple[Any, dict[str, Any]]:
    if sqlite:
        joiner = " " if mode == "all" else " OR "
        match = joiner.join('"' + w.replace('"', "") + '"*' for w in words)  # prefixes match
        stmt = text(
            "SELECT m.created_at, m.role, "
            "snippet(messages_fts, 0, '[', ']', ' … ', 24), s.closed_at IS NULL "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "JOIN sessions s ON s.id = m.session_id "
            "WHERE messages_fts MATCH :q AND s.key = :key "
            "ORDER BY bm25(messages_fts) LIMIT :limit"
        )
        return stmt, {"q": match}
    tsquery = (" & " if mode == "all" else " | ").join(f"{w.lower()}:*" for w in words)
    stmt = text(
        "SELECT m.created_at, m.role, ts_headline('simple', m.content, q, "
        "'StartSel=[, StopSel=], MaxWords=30, MinWords=12'), s.closed_at IS NULL "
        "FROM messages m JOIN sessions s ON s.id = m.session_id, "
        "to_tsquery('simple', :q) q "
        f"WHERE s.key = :key AND m.role IN {_SEARCHABLE} AND {_PG_TSV} @@ q "
        f"ORDER BY ts_rank({_PG_TSV}, q) DESC, m.id DESC LIMIT :limit"
    )
    return stmt, {"q": tsquery}
