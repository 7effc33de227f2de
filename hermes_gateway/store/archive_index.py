"""The archive's keyword index beside the `memories` table: an FTS5 table fed by triggers on
SQLite; on PostgreSQL a stored generated tsvector column (`fts_document`, 'simple': no stemming,
any language) with a GIN index, so neither matching nor ranking parses the text again.

`INDEX_DDL` is what a new database gets in one step; the migration `r07` keeps its own frozen
copy. The pgvector column and indexes (`pgvector_ddl`, `hnsw_index`) are made where the server has
the extension: by the migration `r10` (a frozen copy), and again when the archive opens
(`hermes_gateway.memory.pgvector`), so an extension installed later is used. The table
itself is `hermes_gateway.store.models.MemoryRow`.
"""

from __future__ import annotations

from array import array

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

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

# pgvector, where the server has it: one untyped `vector` column beside the float32 bytes (so
# vectors of any size fit: a new embedding model needs no migration) and one HNSW index per
# vector size, on the column cast to that size, partial to the rows of that size.
PG_VECTOR = "embedding_vec"
HNSW_MAX_DIMS = 2000  # pgvector's limit for an indexed `vector`; larger ones are scanned


def pgvector_ddl(conn: Connection) -> str | None:
    """Create the extension (in a savepoint: a server without it, or a role that may not
    create it, leaves the transaction usable) and the column; the extension's version, or
    None when it is not there."""
    if conn.exec_driver_sql("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").first():
        try:
            with conn.begin_nested():
                conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
        except DBAPIError:
            pass
    row = conn.exec_driver_sql("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    version = row.scalar()
    if version is None:
        return None
    # looked up first: ALTER TABLE would lock the table exclusively at each open
    column = conn.exec_driver_sql(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        f"AND table_name = 'memories' AND column_name = '{PG_VECTOR}'"
    )
    if column.first() is None:
        conn.exec_driver_sql(f"ALTER TABLE memories ADD COLUMN {PG_VECTOR} vector")
    return str(version)


def hnsw_index(dims: int) -> str:
    """The index of the vectors of ``dims`` values (cosine distance)."""
    return (
        f"CREATE INDEX IF NOT EXISTS ix_memories_vec_{dims} ON memories USING hnsw "
        f"(({PG_VECTOR}::vector({dims})) vector_cosine_ops) "
        f"WHERE vector_dims({PG_VECTOR}) = {dims}"
    )


def literal(blob: bytes) -> str:
    """float32 bytes as pgvector's text form (each value's shortest exact decimal)."""
    return "[" + ",".join(map(repr, array("f", blob).tolist())) + "]"
