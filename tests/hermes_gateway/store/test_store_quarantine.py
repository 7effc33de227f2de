"""The inbox's crash-loop guard in the store: the in-flight mark a run commits when it starts
(taken back by a clean stop), the verdict at the next start (suspects; a crash counted only
against the one suspect on probation), quarantine, the operator's retry and drop. A "crash" here
is a mark left in flight and then the next start's `quarantine`. On SQLite's fast path, on
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
    assert await store.suspects(MAX_AGE) == {poison: 0}  # in flight: a suspect, not counted
    assert await rerun_ids(store) == [poison, bystander]
    await store.begin_attempt([poison], probation=True)  # the replay, alone: it dies again
    assert await store.quarantine(AFTER, MAX_AGE) == []
    assert await store.suspects(MAX_AGE) == {poison: 1}
    await store.begin_attempt([poison], probation=True)  # and again
    [held] = await store.quarantine(AFTER, MAX_AGE)
    assert (held.inbox_id, held.attempts, held.event.text) == (poison, 2, "poison")
    assert await attempts(store, poison) == ("quarantined", 2)
    assert await rerun_ids(store) == [bystander]  # never run again
    assert [q.inbox_id for q in await store.quarantined()] == [poison]
    assert await store.quarantine(AFTER, MAX_AGE) == []  # held once, not again each start


async def check_retry_and_drop(store: Store) -> None:
    first, second = await store.accept(dm("1", "one")), await store.accept(dm("2", "two"))
    assert first is not None and second is not None
    for _ in range(AFTER):  # one merged turn, each time on probation: both were in flight
        await store.begin_attempt([first, second], probation=True)
        held = await store.quarantine(AFTER, MAX_AGE)
    assert {q.inbox_id for q in held} == {first, second}
    assert await store.release(second + 100) is None
    released = await store.release(first)
    assert released is not None and released.text == "one"
    assert await attempts(store, first) == ("accepted", 0)  # a fresh count
    assert await store.suspects(MAX_AGE) == {}  # and no longer a suspect
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
        await store.begin_attempt([inbox_id], probation=True)
        await store.undo_attempt([inbox_id])
        assert await store.quarantine(AFTER, MAX_AGE) == []
        assert await store.suspects(MAX_AGE) == {}  # not in flight at a crash
    await store.begin_attempt([inbox_id], probation=True)  # and one crash
    assert await store.quarantine(AFTER, MAX_AGE) == []
    assert await attempts(store, inbox_id) == ("accepted", 1)


async def check_only_reruns_are_held(store: Store) -> None:
    """A reply already computed is a delivery resume, not a rerun; an entry too old to replay
    expires as before. Both were on probation at two crashes: the first counted, the second
    is not judged against them (one is answered, one expired), so neither is held."""
    done, old = await store.accept(dm("1", "answered")), await store.accept(dm("2", "old"))
    assert done is not None and old is not None
    await store.begin_attempt([done, old], probation=True)
    assert await store.quarantine(AFTER, MAX_AGE) == []
    await store.begin_attempt([done, old], probation=True)
    await store.complete_turn("telegram:dm:555", [], [done], "the reply", "run1")
    await store.begin_attempt([done], probation=True)  # settled: no longer marked
    past = time.time() - MAX_AGE - 10
    await store._tx(
        lambda c: c.execute(text(f"UPDATE inbox SET accepted_at = {past} WHERE id = {old}"))
    )
    assert await store.quarantine(AFTER, MAX_AGE) == []
    to_run, [resend] = await store.replayable(MAX_AGE)
    assert to_run == [] and resend.inbox_id == done
    assert await attempts(store, done) == ("done", 1)
    assert await attempts(store, old) == ("expired", 1)


async def check_bad_luck_never_counts(store: Store) -> None:
    """Crashes while several suspects were in flight, or while an entry ran as no suspect, are
    not shown to be its: however many in a row, nothing is counted; what waited is no suspect."""
    a, b, waited = [await store.accept(dm(str(n), f"m{n}")) for n in (1, 2, 3)]
    assert a is not None and b is not None and waited is not None
    for _ in range(5):
        await store.begin_attempt([a, b])  # two ordinary runs (or two suspects) in flight
        assert await store.quarantine(AFTER, MAX_AGE) == []
    assert await store.suspects(MAX_AGE) == {a: 0, b: 0}
    assert [await attempts(store, i) for i in (a, b, waited)] == [("accepted", 0)] * 3
    assert await rerun_ids(store) == [a, b, waited]


async def check_a_crash_no_suspect_explains_forgives(store: Store) -> None:
    """A crash while no suspect was in flight was something else's doing: what was counted
    against the suspects waiting may have been that too. One on probation is not forgiven."""
    a, b, c = [await store.accept(dm(str(n), f"m{n}")) for n in (1, 2, 3)]
    assert a is not None and b is not None and c is not None
    await store.begin_attempt([a, b])
    await store.quarantine(AFTER, MAX_AGE)  # both suspects
    await store.begin_attempt([a], probation=True)
    await store.quarantine(AFTER, MAX_AGE)
    await store.begin_attempt([b], probation=True)
    await store.quarantine(AFTER, MAX_AGE)
    assert await store.suspects(MAX_AGE) == {a: 1, b: 1}  # two poisons are not forgiven
    await store.begin_attempt([c])  # an ordinary run, no suspect in flight: a crash
    assert await store.quarantine(AFTER, MAX_AGE) == []
    assert await store.suspects(MAX_AGE) == {a: 0, b: 0, c: 0}
    await store.quarantine(AFTER, MAX_AGE)  # a start after a clean stop forgives nothing
    await store.begin_attempt([a], probation=True)
    await store.quarantine(AFTER, MAX_AGE)
    await store.quarantine(AFTER, MAX_AGE)
    assert await store.suspects(MAX_AGE) == {a: 1, b: 0, c: 0}


CHECKS = [
    check_a_crash_no_suspect_explains_forgives,
    check_crash_loop_is_quarantined,
    check_bad_luck_never_counts,
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
