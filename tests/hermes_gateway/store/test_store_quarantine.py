"""The inbox's crash-loop guard in the store: attempts counted when a run starts and taken back
by a clean stop, quarantine at start, the operator's retry and drop. On SQLite's fast path, on
the engine (what PostgreSQL uses), and on PostgreSQL itself when HERMES_TEST_POSTGRES is set."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hermes_gateway.store.sqlite import SqliteFastPath
from hermes_gateway.store.store import Store
from tests.harness import dm
from tests.integration.test_postgres import SERVER, pg_url  # noqa: F401  (a fixture)

AFTER, MAX_AGE = 2, 3600.0


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


async def attempts(store: Store, inbox_id: int) -> tuple[str, int]:
    async def run(conn: object) -> tuple[str, int]:
        row = (
            await conn.execute(  # type: ignore[attr-defined]
                text("SELECT status, attempts FROM inbox WHERE id = :i"), {"i": inbox_id}
            )
        ).one()
        return str(row[0]), int(row[1])

    result: tuple[str, int] = await store._query(run)
    return result


async def rerun_ids(store: Store) -> list[int]:
    to_run, _ = await store.replayable(MAX_AGE)
    return [i for i, _ in to_run]


async def check_crash_loop_is_quarantined(store: Store) -> None:
    poison, bystander = await store.accept(dm("1", "poison")), await store.accept(dm("2", "hi"))
    assert poison is not None and bystander is not None
    await store.begin_attempt([poison])  # the first run: the process dies in it
    assert await store.quarantine(AFTER, MAX_AGE) == []  # one death is not a loop
    assert await rerun_ids(store) == [poison, bystander]
    await store.begin_attempt([poison])  # the replay: it dies again
    [held] = await store.quarantine(AFTER, MAX_AGE)
    assert (held.inbox_id, held.attempts, held.event.text) == (poison, 2, "poison")
    assert await attempts(store, poison) == ("quarantined", 2)
    assert await rerun_ids(store) == [bystander]  # never run again
    assert [q.inbox_id for q in await store.quarantined()] == [poison]
    assert await store.quarantine(AFTER, MAX_AGE) == []  # held once, not again each start


async def check_retry_and_drop(store: Store) -> None:
    first, second = await store.accept(dm("1", "one")), await store.accept(dm("2", "two"))
    assert first is not None and second is not None
    for _ in range(AFTER):
        await store.begin_attempt([first, second])  # one merged turn: both were in flight
    assert {q.inbox_id for q in await store.quarantine(AFTER, MAX_AGE)} == {first, second}
    assert await store.release(second + 100) is None
    released = await store.release(first)
    assert released is not None and released.text == "one"
    assert await attempts(store, first) == ("accepted", 0)  # a fresh count
    assert await store.release(first) is None  # no longer quarantined
    assert await rerun_ids(store) == [first]
    assert await store.discard(second)
    assert await attempts(store, second) == ("dropped", 2)
    assert not await store.discard(second)
    assert await store.quarantined() == []


async def check_a_clean_stop_does_not_count(store: Store) -> None:
    inbox_id = await store.accept(dm("1", "long job"))
    assert inbox_id is not None
    await store.undo_attempt([inbox_id])  # never below zero
    assert await attempts(store, inbox_id) == ("accepted", 0)
    for _ in range(3):  # started, then interrupted by SIGTERM's drain, three times
        await store.begin_attempt([inbox_id])
        await store.undo_attempt([inbox_id])
    await store.begin_attempt([inbox_id])  # and one crash
    assert await store.quarantine(AFTER, MAX_AGE) == []
    assert await attempts(store, inbox_id) == ("accepted", 1)


async def check_only_reruns_are_held(store: Store) -> None:
    """A reply already computed is a delivery resume, not a rerun; an entry too old to replay
    expires as before."""
    done, old = await store.accept(dm("1", "answered")), await store.accept(dm("2", "old"))
    assert done is not None and old is not None
    for _ in range(AFTER):
        await store.begin_attempt([done, old])
    await store.complete_turn("telegram:dm:555", [], [done], "the reply", "run1")
    await store.begin_attempt([done])  # settled: no longer counted
    past = time.time() - MAX_AGE - 10
    await store._tx(
        lambda c: c.execute(text(f"UPDATE inbox SET accepted_at = {past} WHERE id = {old}"))
    )
    assert await store.quarantine(AFTER, MAX_AGE) == []
    to_run, [resend] = await store.replayable(MAX_AGE)
    assert to_run == [] and resend.inbox_id == done
    assert await attempts(store, done) == ("done", 2)
    assert await attempts(store, old) == ("expired", 2)


CHECKS = [
    check_crash_loop_is_quarantined,
    check_retry_and_drop,
    check_a_clean_stop_does_not_count,
    check_only_reruns_are_held,
]


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
