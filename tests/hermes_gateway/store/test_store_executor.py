"""One statement set, two executors: the per-message calls and a scheduled run's writes give
the same answers and leave the same rows on the owned SQLite writer as on the engine (SQLite
through aiosqlite, and PostgreSQL); and no module reaches into aiosqlite's private parts."""

from __future__ import annotations

import ast
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from hermes_gateway.errors import FencedOut
from hermes_gateway.scheduler.jobs import plan
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.store import executor as store_executor
from hermes_gateway.store.fence import Fence
from hermes_gateway.store.hotpath import HotPath
from hermes_gateway.store.sqlite import SqliteFastPath
from hermes_gateway.store.store import Store
from tests.harness import dm
from tests.integration.test_postgres import SERVER
from tests.scheduler.test_ledger import T0, hourly, postgres_database
from tests.source_tree import parse

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("hermes_gateway", "adapters", "agent_core", "tools", "bench")
PRIVATE = {"_execute", "_conn"}  # aiosqlite's worker-thread seam and its sqlite3 connection
KEY = "telegram:dm:555"
TABLES = {
    "inbox": "id",
    "sessions": "id",
    "messages": "id",
    "session_fence": "session_key",
    "cron_jobs": "id",
    "cron_runs": "id",
}


def _private_uses(path: Path) -> list[str]:
    """``x._execute`` / ``x._conn`` on anything but the module's own ``self``, and the names
    handed to getattr/hasattr as strings."""
    found = []
    for node in ast.walk(parse(path)):
        own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if (
            isinstance(node, ast.Attribute)
            and node.attr in PRIVATE
            and not (
                own and node.value.id in ("self", "cls")  # type: ignore[attr-defined]
            )
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            named = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if node.func.id in ("getattr", "hasattr") and PRIVATE.intersection(named):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}")
    return found


def test_no_module_uses_aiosqlites_private_attributes() -> None:
    files = [p for package in PRODUCT for p in (ROOT / package).rglob("*.py")]
    assert len(files) > 100  # the packages were found
    assert [use for path in files for use in _private_uses(path)] == []


def test_no_store_and_scheduler_modules_share_a_name() -> None:
    """A name means one thing across the two packages (there were two `writes.py`: the store's
    write gate and the scheduler's run writes; and two `health.py`)."""
    store, scheduler = (
        {p.stem for p in (ROOT / "hermes_gateway" / d).glob("*.py")} for d in ("store", "scheduler")
    )
    assert store & scheduler == {"__init__"}


# -- the same calls on each executor ------------------------------------------------------


@contextlib.asynccontextmanager
async def opened(executor: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store on one executor: the owned SQLite writer, the engine on SQLite (the
    writer refused, as when the database is not in WAL mode), or PostgreSQL's engine."""
    if executor == "postgresql":
        async with postgres_database() as url:
            store = Store(url)
            await store.open()
            try:
                yield store
            finally:
                await store.close()
        return
    with pytest.MonkeyPatch.context() as patch:
        if executor == "engine":
            patch.setattr(SqliteFastPath, "usable", staticmethod(lambda _conn: False))
        store = Store(f"sqlite+aiosqlite:///{tmp_path / f'{executor}.db'}")
        await store.open()
    try:
        assert (store._fast is not None) == (executor == "owned")
        yield store
    finally:
        await store.close()


def _inbox_row(message_id: str) -> dict[str, Any]:
    return {
        "platform": "telegram",
        "chat_id": "555",
        "message_id": message_id,
        "session_key": KEY,
        "payload": f'{{"text": "{message_id}"}}',
        "status": "accepted",
        "accepted_at": T0,
        "updated_at": T0,
        "run_id": "",
    }


def _message(sid: int, role: str, content: str) -> dict[str, Any]:
    return {
        "session_id": sid,
        "role": role,
        "content": content,
        "tool_calls": None,
        "tool_call_id": None,
        "run_id": "run1",
        "created_at": T0 + 1,
        "user_id": "555",
    }


async def _outcome(call: Awaitable[Any]) -> Any:
    """What a call answered, or which refusal it met (the two executors raise the refusal
    of a unique key in their own driver's type)."""
    try:
        return await call
    except (IntegrityError, sqlite3.IntegrityError):
        return "duplicate"
    except FencedOut:
        return "fenced"


async def hot_path_script(store: Store) -> list[Any]:
    """Every per-message call, each in its own `_hot` turn as the store makes them."""

    def hot(fn: Callable[[HotPath], Awaitable[Any]]) -> Awaitable[Any]:
        return store._hot(fn)

    def read(fn: Callable[[HotPath], Awaitable[Any]]) -> Awaitable[Any]:
        return store._hot(fn, read=True)

    first, second = _inbox_row("1"), _inbox_row("2")
    fence, stale = Fence(KEY, 5), Fence(KEY, 4)
    out = [
        await _outcome(hot(lambda db: db.accept(first))),
        await _outcome(hot(lambda db: db.accept(second))),
        await _outcome(hot(lambda db: db.accept(first))),
        await read(lambda db: db.session_id(KEY, create=False, now=T0)),
        await hot(lambda db: db.session_id(KEY, create=True, now=T0)),
        await read(lambda db: db.session_id(KEY, create=False, now=T0)),
        await _outcome(hot(lambda db: db.claim(fence, T0))),
    ]
    sid, ids = out[4], out[:2]
    turn = [_message(sid, "user", "1"), _message(sid, "assistant", "hi")]
    settle = ("done", "hi", "run1", T0 + 1, None)
    out += [
        await hot(lambda db: db.complete_turn(sid, turn, ids[:1], settle, fence)),
        await hot(lambda db: db.mark(ids[1:], "answered", "yes", T0 + 2, fence)),
        await hot(lambda db: db.mark(ids, "sending", None, T0 + 3, None)),
        await hot(lambda db: db.progress(ids[:1], 2, T0 + 4, fence)),
        await hot(lambda db: db.intent(ids, 3, "ref-2", T0 + 5, None)),
        await hot(lambda db: db.fly(ids, 1)),
        await hot(lambda db: db.remember_preview(("telegram", "555", "2"), "preview-9")),
        await _outcome(hot(lambda db: db.claim(stale, T0 + 6))),
        await _outcome(hot(lambda db: db.mark(ids, "lost", "late", T0 + 6, stale))),
        await _outcome(hot(lambda db: db.complete_turn(sid, turn, ids, settle, stale))),
        await read(lambda db: db.history(sid)),
    ]
    return out


async def run_writes_script(store: Store) -> list[Any]:
    """A scheduled run's writes: claim, start, lease renewal, finish, delivery, a manual run."""
    ledger = Ledger(store, "host:1:a", 60)
    # fixed ids: the rows of every executor are compared
    job, other = replace(hourly(), id="0000000a"), replace(hourly(), id="0000000b")
    for j in (job, other):
        await ledger.add(j, T0)
    now = T0 + 3600
    items = [(j, p) for j in (job, other) if (p := plan(j, now, 3600)) is not None]
    writes = ledger.writes
    [run_id, second] = await writes.claim(items, now)
    assert run_id is not None and second is not None
    out: list[Any] = [
        sorted(await writes.start([(run_id, now), (second, now)])),
        await writes.heartbeat([run_id, second], now + 30),
        sorted(await writes.finish(_ends(run_id, now))),
    ]
    await writes.delivered(run_id, "pending", 1)
    out.append(await writes.intent(run_id, 1, "ref-1"))
    await writes.delivered(run_id, "delivered", None)
    out += [
        await writes.claim_now(job.id, now + 1),
        await writes.claim_now(other.id, now + 1),  # its run is still live: none
        await writes.claim(items, now),  # the jobs moved on from these slots: nothing claimed
    ]
    await writes.advance(items, now)  # the jobs have moved on: a no-op
    return out


def _ends(run_id: int, now: float) -> list[Any]:
    from hermes_gateway.scheduler.batch import Finish

    return [Finish(run_id, "succeeded", now + 2, "ok", None, "pending")]


async def dump(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    async def run(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
        rows = {}
        for table, order in TABLES.items():
            result = await conn.execute(text(f"SELECT * FROM {table} ORDER BY {order}"))
            rows[table] = [tuple(r) for r in result]
        return rows

    found: dict[str, list[tuple[Any, ...]]] = await store._query(run)
    return found


EXPECTED_HOT = [
    1,
    2,
    "duplicate",
    None,
    1,
    1,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    None,
    "fenced",
    "fenced",
    "fenced",
    [("user", "1", None, None), ("assistant", "hi", None, None)],
]


async def test_the_same_statements_give_the_same_answers_and_rows(tmp_path: Path) -> None:
    executors = ["owned", "engine"] + (["postgresql"] if SERVER else [])
    seen = {}
    for executor in executors:
        async with opened(executor, tmp_path) as store:
            hot = await hot_path_script(store)
            runs = await run_writes_script(store)
            seen[executor] = (hot, runs, await dump(store))
    hot, runs, rows = seen["owned"]
    assert hot == EXPECTED_HOT
    assert runs[:3] == [[1, 2], 2, [1]]
    assert runs[3:] == [True, 3, None, [None, None]]
    assert [r[:2] for r in rows["messages"]] == [(1, 1), (2, 1)]
    assert all(rows[table] for table in TABLES)
    for executor in executors[1:]:  # each leaves what the owned SQLite writer left
        assert seen[executor][:2] == seen["owned"][:2], executor
        for table in TABLES:
            assert seen[executor][2][table] == rows[table], (executor, table)


async def test_the_first_message_compiles_nothing_on_the_owned_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer compiles the per-message statements as it opens, off the event loop: the
    first message after a start pays sqlite3's cost only, as every later one does."""
    compiled: list[str] = []
    real = store_executor.compile_for_sqlite

    def counting(stmt: Any, params: Any, dialect: Any) -> Any:
        compiled.append(str(stmt).split("\n")[0])
        return real(stmt, params, dialect)

    monkeypatch.setattr(store_executor, "compile_for_sqlite", counting)
    async with opened("owned", tmp_path) as store:
        assert compiled  # at open
        compiled.clear()
        ev = dm("1", "hello")
        inbox_id = await store.accept(ev)
        assert inbox_id is not None
        await store.begin_attempt([inbox_id])
        assert await store.history(ev.session_key) == []
        await store.claim(Fence(ev.session_key, 1))
        await store.intent([inbox_id], 0, "ref", fence=Fence(ev.session_key, 1))
        await store.progress([inbox_id], 1)
        await store.remember_preview(ev, "preview")
        turn = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
        await store.complete_turn(ev.session_key, turn, [inbox_id], "hi", "run1")
        await store.mark([inbox_id], "answered", reply="hi")
        await store.mark([inbox_id], "answered")
        assert await store.history(ev.session_key) == turn
        assert compiled == []
