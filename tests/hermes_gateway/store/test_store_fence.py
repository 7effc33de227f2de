"""Fencing in the store: a session write under a lease's token is refused, with nothing of it
written, once a newer token for that session has been seen; other sessions and unfenced writes
are untouched. On SQLite's fast path, on the engine (what PostgreSQL uses), and on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hermes_gateway.errors import FencedOut
from hermes_gateway.store.sqlite import SqliteFastPath
from hermes_gateway.store.store import Fence, Store
from tests.harness import dm
from tests.integration.test_postgres import SERVER, pg_url  # noqa: F401  (a fixture)

KEY = "telegram:dm:555"  # the session key of tests.harness.dm


@pytest.fixture(params=["fast", "engine"])
async def sqlite_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Store]:
    if request.param == "engine":
        monkeypatch.setattr(SqliteFastPath, "usable", staticmethod(lambda _conn: False))
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    assert (store._fast is not None) == (request.param == "fast")
    yield store
    await store.close()


async def status(store: Store, inbox_id: int) -> tuple[str, int]:
    async def run(conn: object) -> tuple[str, int]:
        row = (
            await conn.execute(  # type: ignore[attr-defined]
                text("SELECT status, parts_sent FROM inbox WHERE id = :i"), {"i": inbox_id}
            )
        ).one()
        return str(row[0]), int(row[1])

    result: tuple[str, int] = await store._query(run)
    return result


async def check_a_stale_token_writes_nothing(store: Store) -> None:
    first = await store.accept(dm("1", "hello"))
    assert first is not None
    old, new = Fence(KEY, 1_000), Fence(KEY, 2_000)
    await store.claim(old)
    await store.progress([first], 1, fence=old)  # the holder writes while it owns the session
    await store.claim(new)  # another instance took the lease over: from now on `old` is stale
    turn = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "late"}]
    with pytest.raises(FencedOut):
        await store.complete_turn(KEY, turn, [first], "late", "run-old", fence=old)
    with pytest.raises(FencedOut):
        await store.mark([first], "answered", reply="late", fence=old)
    with pytest.raises(FencedOut):
        await store.progress([first], 2, fence=old)
    with pytest.raises(FencedOut):
        await store.claim(old)
    assert await store.history(KEY) == []  # the refused turn left no message behind
    assert await status(store, first) == ("accepted", 1)
    # the new owner writes, and an equal token is its own: accepted again and again
    await store.complete_turn(KEY, turn, [first], "fresh", "run-new", fence=new)
    await store.mark([first], "answered", reply="fresh", fence=new)
    assert await status(store, first) == ("answered", 1)
    assert [m["content"] for m in await store.history(KEY)] == ["hello", "late"]


async def check_fences_are_per_session(store: Store) -> None:
    other = await store.accept(dm("2", "hi", chat="777"))
    assert other is not None
    await store.claim(Fence(KEY, 9_000))
    # another session's lower token, and writes with no fence at all, are not affected
    await store.mark([other], "answered", fence=Fence("telegram:dm:777", 5))
    await store.mark([other], "answered")
    assert await status(store, other) == ("answered", 0)


CHECKS = [check_a_stale_token_writes_nothing, check_fences_are_per_session]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
async def test_on_sqlite(sqlite_store: Store, check: object) -> None:
    await check(sqlite_store)  # type: ignore[operator]


@pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)")
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
async def test_on_postgres(pg_url: str, check: object) -> None:  # noqa: F811
    store = Store(pg_url)
    await store.open()
    try:
        await check(store)  # type: ignore[operator]
    finally:
        await store.close()
