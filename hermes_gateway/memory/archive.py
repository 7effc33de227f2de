"""The archive's storage on the store's engine: memories in banks, and the three rankings recall
fuses (keywords by the database's full-text index, vectors by pgvector or a brute-force scan,
recency).

One schema for SQLite and PostgreSQL (`hermes_gateway.store.models.MemoryRow`): vectors are float32
bytes in the row, compared in Python off the event loop; on PostgreSQL with pgvector also in a
`vector` column, ranked by the server (`pgvector.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, insert, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_gateway.memory.pgvector import PgVector
from hermes_gateway.memory.vectors import VectorCache, best, grown
from hermes_gateway.store.archive_index import PG_DOCUMENT
from hermes_gateway.store.models import MemoryRow
from hermes_gateway.store.search import WORD
from hermes_gateway.store.store import Store
from tools.host import Memory

_MEM = cast(Table, MemoryRow.__table__)
_COLUMNS = ("id", "content", "context", "tags", "created_at", "session_key", "message_id")
_SQLITE_KEYWORDS = text(
    "SELECT m.id FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
    "WHERE memories_fts MATCH :q AND m.bank = :bank ORDER BY rank LIMIT :limit"
)
ENOUGH = 10  # keyword matches holding every word before any-word matches are looked for
_RECENT = (
    select(_MEM.c.id)
    .where(_MEM.c.bank == bindparam("bank"))
    .order_by(_MEM.c.id.desc())
    .limit(bindparam("limit"))
)
_NEWEST = select(func.max(_MEM.c.id)).where(_MEM.c.bank == bindparam("bank"))
_VECTORS = (
    select(_MEM.c.id, _MEM.c.embedding)
    .where(_MEM.c.bank == bindparam("bank"), _MEM.c.model == bindparam("model"))
    .where(_MEM.c.embedding.is_not(None), _MEM.c.id > bindparam("after"))
    .order_by(_MEM.c.id)
)
_PG_KEYWORDS = text(
    f"SELECT id FROM memories, to_tsquery('simple', :q) q WHERE bank = :bank AND {PG_DOCUMENT} "
    f"@@ q ORDER BY ts_rank({PG_DOCUMENT}, q) DESC, id DESC LIMIT :limit"
)


class Archive:
    """Reads and writes the `memories` table through the gateway's `Store`."""

    def __init__(
        self, store: Store, cache: VectorCache | None = None, *, pgvector: bool = True
    ) -> None:
        """``pgvector=False``: the brute-force scan even where the server has pgvector."""
        self.store = store
        self.cache = cache or VectorCache()
        self.pg = PgVector(store) if pgvector and not store._is_sqlite else None

    async def open(self) -> None:
        """Probe for pgvector (PostgreSQL), once; the first use does it if this was not called."""
        if self.pg is not None:
            await self.pg.open()

    async def _pg(self, dims: int | None = None) -> PgVector | None:
        """pgvector when it serves this archive (with the index of ``dims`` made)."""
        if self.pg is None or not await self.pg.open():
            return None
        if dims:
            await self.pg.index(dims)
        return self.pg

    async def add(self, rows: list[dict[str, Any]]) -> list[int]:
        """Insert memories (keys: bank, content, context, tags, session_key, message_id,
        created_at, embedding, model); their ids, in order."""

        pg = await self._pg(_dims(row["embedding"] for row in rows))

        async def run(conn: AsyncConnection) -> list[int]:
            ids = []
            for row in rows:
                result = await conn.execute(insert(_MEM).values(**row))
                ids.append(int(result.inserted_primary_key[0]))  # type: ignore[index]
            if pg is not None:
                pairs = zip(ids, (row["embedding"] for row in rows), strict=True)
                await pg.write(conn, [(mid, vec) for mid, vec in pairs if vec])
            return ids

        return await self.store._tx(run)

    async def set_embeddings(self, bank: str, vectors: list[tuple[int, bytes]], model: str) -> None:
        """Give memories of ``bank`` their vectors (a backfill); its cached matrix is dropped."""
        pg = await self._pg(_dims(vec for _, vec in vectors))

        async def run(conn: AsyncConnection) -> None:
            for mid, vec in vectors:
                where = (_MEM.c.id == mid, _MEM.c.bank == bank)
                await conn.execute(update(_MEM).where(*where).values(embedding=vec, model=model))
            if pg is not None:  # the ids are the bank's: just updated under its name
                await pg.write(conn, vectors)

        await self.store._tx(run)
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

    async def rankings(
        self, bank: str, query: str, qvec: bytes | None, model: str, limit: int
    ) -> tuple[list[int], list[int], list[int]]:
        """``bank``'s memories ranked by keywords, by vector (none without ``qvec``) and by
        recency, ``limit`` ids each, best first; the queries share one connection."""
        pg = await self._pg(len(qvec) // 4 if qvec else None)
        if pg is not None:
            return await self._ranked_by_server(pg, bank, query, qvec, model, limit)
        key = (bank, model)
        cached, generation = self.cache.get(key)
        last = cached.last_id if cached is not None else 0

        async def run(conn: AsyncConnection) -> tuple[list[int], list[int], int, list[Any]]:
            keyword = await self._keyword(conn, bank, query, limit)
            recent = await conn.execute(_RECENT, {"bank": bank, "limit": limit})
            newest, rows = last, []
            if qvec is not None:  # only the rows stored since the cached matrix was built
                newest = int((await conn.execute(_NEWEST, {"bank": bank})).scalar() or 0)
                if cached is None or newest > last:
                    params = {"bank": bank, "model": model, "after": last}
                    rows = [(int(i), bytes(b)) for i, b in await conn.execute(_VECTORS, params)]
            return keyword, [int(r[0]) for r in recent], newest, rows

        keyword, recent, newest, rows = await self.store._query(run)
        if qvec is None:
            return keyword, [], recent

        def search() -> list[int]:
            vectors = cached
            if vectors is None or newest > vectors.last_id:
                vectors = grown(cached, rows, len(qvec) // 4, newest)
                self.cache.put(key, vectors, generation)
            return best(vectors.ids, vectors.array, qvec, limit)

        return keyword, await asyncio.to_thread(search), recent

    async def _ranked_by_server(
        self, pg: PgVector, bank: str, query: str, qvec: bytes | None, model: str, limit: int
    ) -> tuple[list[int], list[int], list[int]]:
        async def run(conn: AsyncConnection) -> tuple[list[int], list[int], list[int]]:
            keyword = await self._keyword(conn, bank, query, limit)
            recent = await conn.execute(_RECENT, {"bank": bank, "limit": limit})
            vector = await pg.nearest(conn, bank, model, qvec, limit) if qvec else []
            return keyword, vector, [int(r[0]) for r in recent]

        return await self.store._query(run)

    async def _keyword(self, conn: AsyncConnection, bank: str, query: str, limit: int) -> list[int]:
        """Memories holding all the query's words, or if too few do, any of them (those of 4
        letters or more also as prefixes: "backup" finds "backups"), best first by the
        database's text ranking. All first: ranking every memory holding a common word is what
        costs, and memories holding them all are the best matches anyway."""
        found = [w.lower() for w in WORD.findall(query)]
        # words of one or two letters ("is", "my") match nearly everything: left out when
        # the query has longer ones
        words = [w for w in found if len(w) > 2][:24] or found[:24]
        if not words:
            return []
        if self.store._is_sqlite:
            stmt, joiners = _SQLITE_KEYWORDS, (" AND ", " OR ")
            terms = [f'"{w}"' + ("*" if len(w) >= 4 else "") for w in words]
        else:
            stmt, joiners = _PG_KEYWORDS, (" & ", " | ")
            terms = [w + (":*" if len(w) >= 4 else "") for w in words]
        ids: list[int] = []
        for joiner in joiners[len(terms) == 1 :]:
            params = {"q": joiner.join(terms), "bank": bank, "limit": limit}
            ids = [int(r[0]) for r in await conn.execute(stmt, params)]
            if len(ids) >= min(limit, ENOUGH):
                break
        return ids

    async def fetch(self, bank: str, ids: list[int]) -> list[Memory]:
        """The memories of ``bank`` with these ids, in the order given."""
        if not ids:
            return []
        cols = [_MEM.c[name] for name in _COLUMNS]
        rows = await self._rows(select(*cols).where(_MEM.c.bank == bank, _MEM.c.id.in_(ids)))
        found = {int(r[0]): _memory(r) for r in rows}
        return [found[i] for i in ids if i in found]

    async def forget(self, bank: str, ids: list[int] | None) -> list[int]:
        """Delete memories of ``bank`` (those with these ids, or all with None); the ids that
        were deleted. Their keyword index entries and pgvector values go with the rows
        (`forget_rows`); the bank's cached matrix is dropped so no search ranks them again."""
        gone = await forget_rows(self.store, bank, ids)
        self.cache.forget(bank)
        return gone

    async def count(self, bank: str) -> int:
        stmt = text("SELECT count(*) FROM memories WHERE bank = :bank")
        rows = await self._rows(stmt, {"bank": bank})
        return int(rows[0][0])

    async def _rows(self, stmt: Any, params: dict[str, Any] | None = None) -> list[Any]:
        async def run(conn: AsyncConnection) -> list[Any]:
            return list(await conn.execute(stmt, params or {}))

        return await self.store._query(run)


async def forget_rows(store: Store, bank: str, ids: list[int] | None) -> list[int]:
    """Delete rows of ``bank`` (these ids, or all), in one transaction; the ids deleted.
    Never another bank's: the bank is in the delete's own condition, not only in the lookup.
    The keyword index follows by itself (SQLite: the FTS5 delete trigger; PostgreSQL: a
    generated column of the row), as does pgvector's `vector` column (also in the row)."""
    where = [_MEM.c.bank == bank]
    if ids is not None:
        if not ids:
            return []
        where.append(_MEM.c.id.in_(ids))

    async def run(conn: AsyncConnection) -> list[int]:
        found = [int(r[0]) for r in await conn.execute(select(_MEM.c.id).where(*where))]
        if found:  # all of them: by the same condition (a bank's ids may exceed a bind limit)
            await conn.execute(delete(_MEM).where(*where))
        return sorted(found)

    return await store._tx(run)


def _dims(vectors: Iterable[bytes | None]) -> int | None:
    """The size of the first of these vectors (one embedding model per call)."""
    return next((len(v) // 4 for v in vectors if v), None)


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
