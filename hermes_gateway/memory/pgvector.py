"""The archive's vector ranking on PostgreSQL with pgvector: probed once when the archive
opens (the extension created if the server has it), vectors written to the `vector` column
beside their bytes, and recall as `ORDER BY <=> LIMIT` on the HNSW index of the query's size.
Without the extension (or on SQLite) the archive keeps its brute-force scan (`vectors.py`)."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_gateway.store.archive_index import (
    HNSW_MAX_DIMS,
    PG_VECTOR,
    hnsw_index,
    literal,
    pgvector_ddl,
)
from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.memory")
_LOCK_KEY = 0x6865726D6576  # one opener at a time makes the extension, column and indexes
_UNFILLED = text(
    f"SELECT id, embedding FROM memories WHERE embedding IS NOT NULL AND {PG_VECTOR} IS NULL "
    "LIMIT 1000"
)
_SIZES = text(
    f"SELECT DISTINCT vector_dims({PG_VECTOR}) FROM memories WHERE {PG_VECTOR} IS NOT NULL"
)
_WRITE = text(f"UPDATE memories SET {PG_VECTOR} = CAST(:v AS vector) WHERE id = :id")


def _version(found: str) -> tuple[int, ...]:
    return tuple(int(p) for p in found.split(".") if p.isdigit())


def _params(vectors: list[tuple[int, bytes]]) -> list[dict[str, Any]]:
    return [{"id": mid, "v": literal(vec)} for mid, vec in vectors]


class PgVector:
    """Whether pgvector serves this archive (`usable`, known after `open`), and its queries."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.version: tuple[int, ...] | None = None
        self._opened = False
        self._open_lock = asyncio.Lock()
        self._indexed: set[int] = set()  # vector sizes whose index exists

    @property
    def usable(self) -> bool:
        return self.version is not None

    async def open(self) -> bool:
        """Probe once (later calls return what the first found)."""
        async with self._open_lock:
            if not self._opened:
                self.version = await self.store._tx(self._probe)
                self._opened = True
                if self.version is None:
                    log.warning("memory.pgvector_unavailable", fallback="brute-force scan")
                else:
                    log.info("memory.pgvector", version=".".join(map(str, self.version)))
        return self.usable

    async def _probe(self, conn: AsyncConnection) -> tuple[int, ...] | None:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        found = await conn.run_sync(pgvector_ddl)
        if found is None:
            return None
        version = _version(found)
        filled = await self._fill(conn)
        if filled:
            log.info("memory.pgvector_filled", rows=filled)
        sizes = await conn.execute(_SIZES)
        for (dims,) in list(sizes):
            if dims <= HNSW_MAX_DIMS and version >= (0, 5):
                await conn.exec_driver_sql(hnsw_index(int(dims)))
                self._indexed.add(int(dims))
        return version

    async def _fill(self, conn: AsyncConnection) -> int:
        """Rows holding only the bytes (stored while the extension was not there) get their
        `vector`, converted off the event loop; how many."""
        done = 0
        while rows := list(await conn.execute(_UNFILLED)):
            params = await asyncio.to_thread(_params, [(int(i), bytes(b)) for i, b in rows])
            await conn.execute(_WRITE, params)
            done += len(rows)
        return done

    async def index(self, dims: int) -> None:
        """The HNSW index of vectors of ``dims`` values exists (made at the first vector of
        that size: a new embedding model's; a large size is scanned, not indexed)."""
        if dims in self._indexed or dims > HNSW_MAX_DIMS or not self.hnsw:
            return

        async def run(conn: AsyncConnection) -> None:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            await conn.exec_driver_sql(hnsw_index(dims))

        await self.store._tx(run)
        self._indexed.add(dims)

    @property
    def hnsw(self) -> bool:
        return self.version is not None and self.version >= (0, 5)

    async def write(self, conn: AsyncConnection, vectors: list[tuple[int, bytes]]) -> None:
        """Give these memories their `vector` (in the caller's transaction)."""
        if vectors:
            await conn.execute(_WRITE, _params(vectors))

    async def nearest(
        self, conn: AsyncConnection, bank: str, model: str, qvec: bytes, limit: int
    ) -> list[int]:
        """The ``limit`` memories of ``bank`` (vectors of ``model``) nearest to ``qvec``."""
        dims = len(qvec) // 4
        # the size is written out: the partial index is chosen only for a literal predicate
        cast = f"{PG_VECTOR}::vector({dims})"
        if self.hnsw:  # enough candidates for `limit`, and the bank's even if others' are nearer
            await conn.exec_driver_sql(f"SET LOCAL hnsw.ef_search = {max(40, limit * 2)}")
        if self.version is not None and self.version >= (0, 8):
            await conn.exec_driver_sql("SET LOCAL hnsw.iterative_scan = strict_order")
        stmt = text(
            f"SELECT id FROM memories WHERE bank = :bank AND model = :model "
            f"AND vector_dims({PG_VECTOR}) = {dims} "
            f"ORDER BY {cast} <=> CAST(:q AS vector({dims})) LIMIT :limit"
        )
        params: dict[str, Any] = {"bank": bank, "model": model, "q": literal(qvec), "limit": limit}
        return [int(r[0]) for r in await conn.execute(stmt, params)]
