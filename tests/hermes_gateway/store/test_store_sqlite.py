"""The SQLite fast path (`hermes_gateway/store/sqlite.py`): each write transaction runs as one
call on aiosqlite's thread, all or nothing; without that seam the store runs on the engine."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from hermes_gateway.store.sqlite import SqliteFastPath
from hermes_gateway.store.store import Store
from tests.hermes_gateway.store.test_store_migration import event

TURN = [{"role": "user", "content": "message 1"}, {"role": "assistant", "content": "hi"}]


async def a_whole_turn(store: Store) -> None:
    """Accept, store the turn, settle: what every message does; then read it all back."""
    ev = event("1")
    inbox_id = await store.accept(ev)
    assert inbox_id is not None
    assert await store.accept(ev) is None  # a duplicate delivery is refused
    await store.complete_turn(ev.session_key, TURN, [inbox_id], "hi", "run1")
    await store.mark([inbox_id], "answered")
    assert await store.history(ev.session_key) == TURN
    to_run, to_send = await store.replayable(3600)
    assert (to_run, to_send) == ([], [])


async def test_sqlite_runs_on_the_fast_path(store: Store) -> None:
    # an aiosqlite release without the seam would fall back silently: fail here instead
    assert store._fast is not None
    await a_whole_turn(store)


async def test_a_failing_statement_undoes_the_whole_transaction(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(f"sqlite+aiosqlite:///{path}")
    await store.open()
    try:
        fast = store._fast
        assert fast is not None
        insert = ("INSERT INTO sessions (key, created_at) VALUES (?, ?)", ("k", 1.0))
        with pytest.raises(sqlite3.OperationalError):
            await fast._commit([insert, ("INSERT INTO no_such_table VALUES (?)", (1,))])
        assert await fast._commit([insert]) is not None  # the connection is usable again
    finally:
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM sessions WHERE key = 'k'").fetchone() == (1,)


async def test_without_the_seam_the_store_runs_on_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SqliteFastPath, "usable", staticmethod(lambda _conn: False))
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    with capture_logs() as logs:
        await store.open()
    try:
        assert store._fast is None
        assert [e["event"] for e in logs].count("store.fast_path_unavailable") == 1
        await a_whole_turn(store)
    finally:
        await store.close()
