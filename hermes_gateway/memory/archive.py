"""The archive's storage on the store's engine: memories in banks, and the three rankings recall
fuses (keywords by the database's full-text index, vectors by a brute-force scan, recency).

One schema for SQLite and PostgreSQL (`hermes_gateway.models.MemoryRow`): vectors are float32
bytes in the row, compared in Python off the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from sqlalchemy import Table, insert, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_gateway.memory.schema import PG_DOCUMENT
from hermes_gateway.memory.vectors import VectorCache, best, grown
from hermes_gateway.models import MemoryRow
from hermes_gateway.store import Store
from hermes_gateway.store_search import WORD
from tools.host import Memory

_MEM = cast(Table, MemoryRow.__table__)
_COLUMNS = ("id", "content", "context", "tags", "created_at", "session_key", "message_id")
_SQLITE_KEYWORDS = text(
    "SELECT m.id FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
    "WHERE memories_fts MATCH :q AND m.bank = :bank ORDER BY bm25(memories_fts) LIMIT :limit"
)
_PG_KEYWORDS = text(
    f"SELECT id FROM memories, to_tsquery('simple', :q) q WHERE bank = :bank AND {PG_DOCUMENT} "
    f"@@ q ORDER BY ts_rank({PG_DOCUMENT}, q) DESC, id DESC LIMIT :limit"
)


class Archive:
    """Reads and writes the `memories` table through the gateway's `Store`."""

    def __init__(self, store: Store, cache: VectorCache | None = None) -> None:
        self.store = store
        self.cache = cache or VectorCache()

    async def add(self, rows: list[dict[str, Any]]) -> list[int]:
        """Insert memories (keys: bank, content, context, tags, session_key, message_id,
        created_at, embedding, model); their ids, in order."""

        async def run(conn: AsyncConnection) -> list[int]:
            ids = []
            for row in rows:
                result = await conn.execute(insert(_MEM).values(**row))
                ids.append(int(result.inserted_primary_key[0]))  # type: ignore[index]
            return ids

        return await self.store._tx(run)

    async def set_embeddings(self, vectors: list[tuple[int, bytes]], model: str) -> None:
        async def run(conn: AsyncConnection) -> None:
            for mid, vec in vectors:
                await conn.execute(
                    update(_MEM).where(_MEM.c.id == mid).values(embedding=vec, model=model)
                )

        await self.store._tx(run)
        banks = await self._rows(
            select(_MEM.c.bank).where(_MEM.c.id.in_([m for m, _ in vectors])).distinct()
        )
        for (bank,) in banks:
            self.cache.forget(bank)

    async def unembedded(self, bank: str, model: str, limit: int) -> list[tuple[int, str]]:
        """Memories of ``bank`` without a vector of ``model`` (stored while no embeddings
        endpoint answered, or under another model), newest first."""
        stmt = (
            select(_MEM.c.id, _MEM.c.content)
            .where(_MEM.c.bank == bank, or_(_MEM.c.embedding.is_(None), _MEM.c.model != model))
            .order_by(_MEM.c.id.desc())
            .limit(limit)
        )
        return await self._rows(stmt)

    async def keyword(self, bank: str, query: str, limit: int) -> list[int]:
        """Ids of ``bank``'s memories holding any of the query's words (as prefixes), best
        first by the database's text ranking."""
        words = [w.lower() for w in WORD.findall(query)][:24]
        if not words:
            return []
        if self.store._is_sqlite:
            stmt = _SQLITE_KEYWORDS
            q = " OR ".join('"' + w.replace('"', "") + '"*' for w in words)
        else:
            stmt, q = _PG_KEYWORDS, " | ".join(f"{w}:*" for w in words)
        rows = await self._rows(stmt, {"q": q, "bank": bank, "limit": limit})
        return [int(r[0]) for r in rows]

    async def vector(self, bank: str, query: bytes, model: str, limit: int) -> list[int]:
        """Ids of ``bank``'s memories nearest to the unit vector ``query`` (same model): the
        cached matrix plus the rows stored since, scanned in a thread."""
        key = (bank, model)
        cached, generation = self.cache.get(key)
        stmt = (
            select(_MEM.c.id, _MEM.c.embedding)
            .where(_MEM.c.bank == bank, _MEM.c.model == model, _MEM.c.embedding.is_not(None))
            .where(_MEM.c.id > (cached.last_id if cached else 0))
            .order_by(_MEM.c.id)
        )
        rows = [(int(mid), bytes(blob)) for mid, blob in await self._rows(stmt)]

        def search() -> list[int]:
            vectors = cached
            if vectors is None or rows:
                vectors = grown(cached, rows, len(query) // 4)
                self.cache.put(key, vectors, generation)
            return best(vectors.ids, vectors.matrix, query, limit)

        return await asyncio.to_thread(search)

    async def recent(self, bank: str, limit: int) -> list[int]:
        stmt = (
            select(_MEM.c.id)
            .where(_MEM.c.bank == bank)
            .order_by(_MEM.c.created_at.desc(), _MEM.c.id.desc())
            .limit(limit)
        )
        return [int(r[0]) for r in await self._rows(stmt)]

    async def fetch(self, bank: str, ids: list[int]) -> list[Memory]:
        """The memories of ``bank`` with these ids, in the order given."""
        if not ids:
            return []
        cols = [_MEM.c[name] for name in _COLUMNS]
        rows = await self._rows(select(*cols).where(_MEM.c.bank == bank, _MEM.c.id.in_(ids)))
        found = {int(r[0]): _memory(r) for r in rows}
        return [found[i] for i in ids if i in found]

    async def count(self, bank: str) -> int:
        stmt = text("SELECT count(*) FROM memories WHERE bank = :bank")
        rows = await self._rows(stmt, {"bank": bank})
        return int(rows[0][0])

    async def _rows(self, stmt: Any, params: dict[str, Any] | None = None) -> list[Any]:
        async def run(conn: AsyncConnection) -> list[Any]:
            return list(await conn.execute(stmt, params or {}))

        return await self.store._query(run)


def join_tags(tags: tuple[str, ...]) -> str:
    return " ".join(t.replace(" ", "_") for t in tags)


def _memory(row: Any) -> Memory:
    mid, content, context, tags, created_at, session_key, message_id = row
    return Memory(
        id=int(mid),
        content=content,
        context=context or "",
        tags=tuple((tags or "").split()),
        when=float(created_at),
        session_key=session_key or "",
        message_id=message_id or "",
    )
