"""The archive's keyword index beside the `memories` table: an FTS5 table fed by triggers on
SQLite; on PostgreSQL a stored generated tsvector column (`fts_document`, 'simple': no stemming,
any language) with a GIN index, so neither matching nor ranking parses the text again.

`INDEX_DDL` is what a new database gets in one step; the migration `r07` keeps its own frozen
copy. The table itself is `hermes_gateway.store.models.MemoryRow`.
"""

from __future__ import annotations

# the text the keyword search sees: the memory, its context and its tags
PG_DOCUMENT = "fts_document"
_PG_TSV = "to_tsvector('simple', content || ' ' || context || ' ' || tags)"

INDEX_DDL: dict[str, list[str]] = {
    "sqlite": [
        "CREATE VIRTUAL TABLE memories_fts USING fts5(content, context, tags, "
        "content='memories', content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
        "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
        "INSERT INTO memories_fts(rowid, content, context, tags) "
        "VALUES (new.id, new.content, new.context, new.tags); END",
        "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
        "INSERT INTO memories_fts(memories_fts, rowid, content, context, tags) "
        "VALUES ('delete', old.id, old.content, old.context, old.tags); END",
    ],
    "postgresql": [
        f"ALTER TABLE memories ADD COLUMN {PG_DOCUMENT} tsvector "
        f"GENERATED ALWAYS AS ({_PG_TSV}) STORED",
        f"CREATE INDEX ix_memories_fts ON memories USING gin ({PG_DOCUMENT})",
    ],
}
