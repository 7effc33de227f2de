"""The archive on PostgreSQL with pgvector (CI's server has the extension when its Debian
package installs): recall by meaning ranked by the server, the same ranking as the brute-force
scan, a model of another size, the revision that fills the column, per-user banks, and the
brute-force fallback on a database where the extension cannot be created."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Connection, text
from structlog.testing import capture_logs

from hermes_gateway.memory.archive import Archive
from hermes_gateway.memory.embeddings import pack
from hermes_gateway.memory.service import MemoryService
from hermes_gateway.store import migrate as store_migrate
from hermes_gateway.store.store import Store
from tests.fakes.embeddings import embed
from tests.integration.test_postgres import SERVER
from tests.integration.test_postgres import pg_url as pg_url  # fixture

pytestmark = pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)")
KITTEN = "Mittens the kitten sleeps on the sofa"
BACKUP = "The nightly backup runs at 03:00"


class FakeEmbedder:
    """tests/fakes/embeddings.py's vectors, ``repeat`` times over (another model's size)."""

    def __init__(self, model: str = "fake", repeat: int = 1) -> None:
        self.model, self.repeat = model, repeat

    def embed(self, texts: list[str]) -> list[bytes]:
        return [pack(embed(t) * self.repeat) for t in texts]

    def close(self) -> None:
        pass


def service(store: Store, embedder: FakeEmbedder, *, pgvector: bool = True) -> MemoryService:
    return MemoryService(
        Archive(store, pgvector=pgvector),
        None,  # type: ignore[arg-type]  # no model call: no extract, no reflect
        embedder,  # type: ignore[arg-type]
        extract=False,
        token_budget=1500,
        recall_limit=8,
    )


async def retain(svc: MemoryService, bank: str, content: str) -> None:
    from hermes_gateway.memory.service import Source

    await svc.retain(bank, content, "", (), Source("api:dm:x", "1"))


async def scalar(store: Store, sql: str) -> Any:
    async def run(conn: Any) -> Any:
        return (await conn.execute(text(sql))).scalar()

    return await store._query(run)


async def has_pgvector() -> bool:
    import asyncpg

    user, _, rest = SERVER.partition("@")
    conn = await asyncpg.connect(user=user, host=rest.split("host=", 1)[1], database="postgres")
    try:
        sql = "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        return await conn.fetchval(sql) is not None
    finally:
        await conn.close()


@pytest.fixture
async def vector_url(pg_url: str) -> str:
    if not await has_pgvector():
        pytest.skip("this PostgreSQL server has no pgvector (postgresql-NN-pgvector)")
    return pg_url


async def test_recall_by_meaning_is_ranked_by_pgvector(vector_url: str) -> None:
    store = Store(vector_url)
    await store.open()
    try:
        svc = service(store, FakeEmbedder())
        with capture_logs() as logs:
            await svc.archive.open()
        await retain(svc, "telegram/1", KITTEN)
        await retain(svc, "telegram/1", BACKUP)
        found = await svc.recall("telegram/1", "feline pet", 5)  # no word in common
        _, by_vector, _ = await svc.archive.rankings(
            "telegram/1", "", pack(embed("pet")), "fake", 5
        )
        filled = await scalar(store, "SELECT count(embedding_vec) FROM memories")
        index = await scalar(store, "SELECT indexdef FROM pg_indexes WHERE indexname LIKE '%vec%'")
    finally:
        await store.close()
    assert [e["event"] for e in logs] == ["memory.pgvector"]
    assert found.memories[0].content == KITTEN and found.note == ""
    assert by_vector == [1, 2]  # the kitten, then the rest of the bank
    assert svc.archive.cache.get(("telegram/1", "fake"))[0] is None  # no matrix was built
    assert filled == 2
    dims = len(embed("x"))
    assert f"USING hnsw (((embedding_vec)::vector({dims})) vector_cosine_ops)" in index


async def test_the_same_ranking_as_the_brute_force_scan_within_each_bank(vector_url: str) -> None:
    store = Store(vector_url)
    await store.open()
    rng = random.Random(5)
    try:
        by_server = Archive(store)
        brute = Archive(store, pgvector=False)
        await by_server.open()
        rows = []
        for i in range(300):  # random vectors: no two memories at the same distance
            vec = pack([rng.gauss(0, 1) for _ in range(32)])
            bank = ("telegram/1", "telegram/2", "discord/9")[i % 3]
            rows.append({"bank": bank, "content": f"memory {i}", "context": "", "tags": ""})
            rows[-1].update(session_key="", message_id="", created_at=float(i))
            rows[-1].update(embedding=vec, model="m")
        ids = await by_server.add(rows)
        owner = {mid: row["bank"] for mid, row in zip(ids, rows, strict=True)}
        for n in range(10):
            bank = ("telegram/1", "telegram/2", "discord/9")[n % 3]
            query = pack([rng.gauss(0, 1) for _ in range(32)])
            _, server, _ = await by_server.rankings(bank, "", query, "m", 20)
            _, scan, _ = await brute.rankings(bank, "", query, "m", 20)
            assert server == scan and len(server) == 20
            assert {owner[mid] for mid in server} == {bank}
    finally:
        await store.close()


async def test_per_user_banks_on_pgvector(vector_url: str) -> None:
    store = Store(vector_url)
    await store.open()
    try:
        svc = service(store, FakeEmbedder())
        await retain(svc, "telegram/1", KITTEN)
        await retain(svc, "telegram/2", BACKUP)
        mine = await svc.recall("telegram/1", "feline pet", 5)
        theirs = await svc.recall("telegram/2", "feline pet", 5)
        _, vector, _ = await svc.archive.rankings(
            "telegram/2", "", pack(embed("kitten")), "fake", 5
        )
    finally:
        await store.close()
    assert [m.content for m in mine.memories] == [KITTEN]
    assert KITTEN not in [m.content for m in theirs.memories]
    assert vector == [2]  # the nearest of bank 2 is its own backup note, never bank 1's kitten


async def test_a_model_of_another_size_gets_its_own_index(vector_url: str) -> None:
    store = Store(vector_url)
    await store.open()
    try:
        await retain(service(store, FakeEmbedder("small")), "telegram/1", KITTEN)
        await retain(service(store, FakeEmbedder("small")), "telegram/1", BACKUP)
        bigger = service(store, FakeEmbedder("large", repeat=3))
        found = await bigger.recall("telegram/1", "feline pet", 5)  # re-embeds the bank first
        sizes = await scalar(
            store, "SELECT array_agg(DISTINCT vector_dims(embedding_vec)) FROM memories"
        )
        indexes = await scalar(
            store, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'ix_memories_vec_%'"
        )
    finally:
        await store.close()
    assert found.memories[0].content == KITTEN and found.note == ""
    assert sizes == [len(embed("x")) * 3]
    assert indexes == 2  # the small model's stays (its rows may come back under it)


async def test_the_revision_fills_the_column_from_the_stored_vectors(vector_url: str) -> None:
    await store_migrate.run(
        vector_url, {}, lambda conn: command.upgrade(store_migrate._config(conn), "r09")
    )

    def old_rows(conn: Connection) -> None:
        for n, body in enumerate((KITTEN, BACKUP)):
            conn.execute(
                text(
                    "INSERT INTO memories (bank, content, created_at, embedding, model) "
                    "VALUES ('telegram/1', :body, :n, :vec, 'fake')"
                ),
                {"body": body, "n": n, "vec": pack(embed(body))},
            )

    await store_migrate.run(vector_url, {}, old_rows)
    store = Store(vector_url)
    await store.open()
    try:
        filled = await scalar(store, "SELECT count(embedding_vec) FROM memories")
        svc = service(store, FakeEmbedder())
        _, vector, _ = await svc.archive.rankings("telegram/1", "", pack(embed("cat")), "fake", 5)
    finally:
        await store.close()
    assert filled == 2 and vector == [1, 2]
    assert svc.archive.pg is not None and svc.archive.pg.usable


@pytest.fixture
async def no_extension_url() -> AsyncIterator[str]:
    """A database owned by a role that is not a superuser: it may make tables, not create
    pgvector (an untrusted extension), as on a managed server without it."""
    import asyncpg

    user, _, rest = SERVER.partition("@")
    host = rest.split("host=", 1)[1]
    name = f"hermes_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(user=user, host=host, database="postgres")
    await admin.execute(f"CREATE ROLE {name} LOGIN")
    await admin.execute(f"CREATE DATABASE {name} OWNER {name}")
    try:
        yield f"postgresql+asyncpg://{name}@/{name}?host={host}"
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.execute(f"DROP ROLE {name}")
        await admin.close()


async def test_without_the_extension_the_brute_force_scan_ranks(no_extension_url: str) -> None:
    await store_migrate.run(
        no_extension_url, {}, lambda conn: command.upgrade(store_migrate._config(conn), "r09")
    )
    store = Store(no_extension_url)
    await store.open()  # migrates to the head: the pgvector part is skipped, not failed
    try:
        svc = service(store, FakeEmbedder())
        with capture_logs() as logs:
            await svc.archive.open()
            await retain(svc, "telegram/1", KITTEN)
            await retain(svc, "telegram/1", BACKUP)
            found = await svc.recall("telegram/1", "feline pet", 5)
            await svc.recall("telegram/1", "nightly restore", 5)
        column = await scalar(
            store,
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'embedding_vec'",
        )
    finally:
        await store.close()
    assert [e["event"] for e in logs] == ["memory.pgvector_unavailable"]  # once
    assert svc.archive.pg is not None and not svc.archive.pg.usable
    assert found.memories[0].content == KITTEN and found.note == ""
    assert svc.archive.cache.get(("telegram/1", "fake"))[0] is not None  # the scan's matrix
    assert column == 0


async def test_an_extension_installed_later_is_used_at_the_next_open(no_extension_url: str) -> None:
    import asyncpg

    store = Store(no_extension_url)
    await store.open()
    try:
        svc = service(store, FakeEmbedder())
        await retain(svc, "telegram/1", KITTEN)  # vectors as bytes only
        await retain(svc, "telegram/1", BACKUP)
    finally:
        await store.close()
    if not await has_pgvector():
        pytest.skip("this PostgreSQL server has no pgvector (postgresql-NN-pgvector)")
    role = no_extension_url.split("://", 1)[1].split("@", 1)[0]
    user, _, rest = SERVER.partition("@")
    admin = await asyncpg.connect(user=user, host=rest.split("host=", 1)[1], database="postgres")
    await admin.execute(f"ALTER ROLE {role} SUPERUSER")  # now it may create the extension
    await admin.close()
    store = Store(no_extension_url)
    await store.open()
    try:
        svc = service(store, FakeEmbedder())
        with capture_logs() as logs:
            await svc.archive.open()
        filled = await scalar(store, "SELECT count(embedding_vec) FROM memories")
        _, vector, _ = await svc.archive.rankings("telegram/1", "", pack(embed("cat")), "fake", 5)
    finally:
        await store.close()
    assert [e["event"] for e in logs] == ["memory.pgvector_filled", "memory.pgvector"]
    assert filled == 2 and vector == [1, 2]
    assert svc.archive.cache.get(("telegram/1", "fake"))[0] is None
