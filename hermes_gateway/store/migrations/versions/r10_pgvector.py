"""pgvector, where the PostgreSQL server has it: the extension, an untyped `vector` column
`embedding_vec` on `memories` filled from the stored float32 bytes, and an HNSW index (cosine)
per vector size. Nothing on SQLite, or on a server without the extension (or a role that may
not create it): the archive then ranks vectors by its brute-force scan.

Revision ID: r10
"""

from __future__ import annotations

from array import array

import sqlalchemy as sa
from alembic import op
from sqlalchemy.exc import DBAPIError

revision = "r10"
down_revision = "r09"
branch_labels = None
depends_on = None

# frozen here as this revision made them (the archive's own copy, in
# hermes_gateway/store/archive_index.py, runs again at each open)


def _index(dims: int) -> str:
    return (
        f"CREATE INDEX IF NOT EXISTS ix_memories_vec_{dims} ON memories USING hnsw "
        f"((embedding_vec::vector({dims})) vector_cosine_ops) "
        f"WHERE vector_dims(embedding_vec) = {dims}"
    )


def _extension(bind: sa.Connection) -> bool:
    if bind.exec_driver_sql("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").first():
        try:
            with bind.begin_nested():
                bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
        except DBAPIError:
            pass
    found = bind.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'vector'").first()
    return found is not None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or not _extension(bind):
        return
    op.execute("ALTER TABLE memories ADD COLUMN IF NOT EXISTS embedding_vec vector")
    update = sa.text("UPDATE memories SET embedding_vec = CAST(:v AS vector) WHERE id = :id")
    while True:
        rows = bind.exec_driver_sql(
            "SELECT id, embedding FROM memories WHERE embedding IS NOT NULL "
            "AND embedding_vec IS NULL LIMIT 1000"
        ).all()
        if not rows:
            break
        values = [array("f", bytes(blob)).tolist() for _, blob in rows]
        text = ["[" + ",".join(map(repr, v)) + "]" for v in values]
        bind.execute(update, [{"id": r[0], "v": t} for r, t in zip(rows, text, strict=True)])
    sizes = bind.exec_driver_sql(
        "SELECT DISTINCT vector_dims(embedding_vec) FROM memories WHERE embedding_vec IS NOT NULL"
    )
    for (dims,) in list(sizes):
        if dims <= 2000:  # pgvector indexes no larger `vector`
            op.execute(_index(int(dims)))
