"""The owned SQLite writer: one `sqlite3` connection to the store's file, driven from one
dedicated thread, on which the per-message transactions (and a scheduled run's) execute.

Each message writes three times (inbox, turn, "answered"). Through the async engine that is
about 0.5 ms of CPU per transaction (greenlet hops, result wrapping); here a transaction is one
hop to the thread and back, and its statements run as compiled SQL (`executor.SqliteExecutor`).
The engine still opens, pools and migrates the database, and runs every other query;
PostgreSQL uses the engine for everything.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Executable

from hermes_gateway.store.executor import Executor, Params, SqliteExecutor

T = TypeVar("T")
_Job = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.Future[Any]"]


class SqliteThread:
    """One `sqlite3` connection and the one thread that ever uses it: calls queue for it in
    the order they are made, and each answers through its caller's event loop."""

    def __init__(self, path: str, lock_wait_s: float) -> None:
        self._path = path
        self._lock_wait_s = lock_wait_s
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="store-writer", daemon=True)
        self._open = False

    async def start(self) -> None:
        self._thread.start()
        self._open = True
        await self.call(lambda _none: None)  # the connection is open (or its error raised)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` on the thread. A cancelled caller stops waiting, not the call."""
        if not self._open:
            raise sqlite3.ProgrammingError("the store's SQLite writer is closed")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.put((fn, args, future))
        return await future

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """One statement outside any transaction (a PRAGMA, say)."""
        await self.call(lambda conn: conn.execute(sql, params).close())

    async def stop(self) -> None:
        self._open = False
        if self._thread.is_alive():
            self._jobs.put(None)
            await asyncio.to_thread(self._thread.join)

    def _serve(self) -> None:
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            self._fail_all(exc)
            return
        try:
            while (job := self._jobs.get()) is not None:
                fn, args, future = job
                try:
                    result = fn(conn, *args)
                except BaseException as exc:  # the caller gets it, whatever it is
                    future.get_loop().call_soon_threadsafe(_settle, future, None, exc)
                else:
                    future.get_loop().call_soon_threadsafe(_settle, future, result, None)
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        # autocommit: transactions are the explicit BEGIN IMMEDIATE ... COMMIT of `_transaction`
        conn = sqlite3.connect(
            self._path, timeout=self._lock_wait_s, isolation_level=None, check_same_thread=False
        )
        sqlite_pragmas(conn, None)
        return conn

    def _fail_all(self, exc: sqlite3.Error) -> None:
        """The connection did not open: every call made (and any later one) fails with why."""
        while (job := self._jobs.get()) is not None:
            _fn, _args, future = job
            future.get_loop().call_soon_threadsafe(_settle, future, None, exc)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class SqliteFastPath:
    """The owned writer: `transaction` runs a body of `executor.Executor` calls as one
    transaction on the writer's thread. Callers serialize writes (`StoreEngine`'s lock)."""

    def __init__(self, path: str, lock_wait_s: float) -> None:
        self._db = SqliteThread(path, lock_wait_s)
        self._executor: SqliteExecutor | None = None

    @staticmethod
    def usable(conn: sqlite3.Connection) -> bool:
        """Whether a second connection may write the store's file beside the engine's: only in
        WAL mode do the engine's readers keep reading while it writes."""
        row = conn.execute("PRAGMA journal_mode").fetchone()
        return row is not None and str(row[0]).lower() == "wal"

    async def open(self, warm: Sequence[tuple[Executable, Params]] = ()) -> bool:
        """Open the connection and its thread; False (and nothing left open) when it cannot
        serve: the store then runs on the engine alone. ``warm``: statements to compile now
        (`SqliteExecutor.prepare`), on the writer's thread."""
        await self._db.start()
        if not await self._db.call(self.usable):
            await self.close()
            return False
        self._executor = executor = await self._db.call(SqliteExecutor)
        await self._db.call(lambda _conn: executor.prepare(warm))
        return True

    async def close(self) -> None:
        await self._db.stop()
        self._executor = None

    async def transaction(self, body: Callable[[Executor], T], *, write: bool = True) -> T:
        """``body`` in one transaction, the write lock taken first (``write``: it may read
        before it writes); a read runs without one (each statement sees the newest commit)."""
        assert self._executor is not None, "the SQLite writer is not open"
        return await self._db.call(_transaction if write else _read, body, self._executor)

    async def group(self, bodies: list[Callable[[Executor], Any]]) -> list[tuple[bool, Any]]:
        """``bodies`` in one write transaction, each in a savepoint: for each, (True, its
        result) or (False, what it raised, its writes rolled back); raises when the
        transaction itself fails (nothing of it committed). `group.GroupCommit` calls it."""
        assert self._executor is not None, "the SQLite writer is not open"
        return await self._db.call(_group, bodies, self._executor)

    async def _commit(self, statements: list[tuple[str, Any]]) -> int | None:
        """Plain SQL statements in one transaction (upkeep by hand): the last one's rowid."""

        def run(conn: sqlite3.Connection) -> int | None:
            last = None
            for sql, params in statements:
                last = conn.execute(sql, params).lastrowid
            return last

        return await self._db.call(_raw_transaction, run)


def _transaction(conn: sqlite3.Connection, body: Callable[[Any], T], db: Any) -> T:
    """On the writer's thread: ``body`` in a write transaction, committed; rolled back on
    error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(db)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return result


def _group(
    conn: sqlite3.Connection, bodies: list[Callable[[Executor], Any]], db: Executor
) -> list[tuple[bool, Any]]:
    """On the writer's thread: the bodies of a group, in order, in one transaction. Alone, a
    body needs no savepoint: it is the transaction (what it raises fails the group of one)."""
    if len(bodies) == 1:
        return [(True, _transaction(conn, bodies[0], db))]
    outcomes: list[tuple[bool, Any]] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for body in bodies:
            outcomes.append(_in_savepoint(conn, body, db))
        conn.commit()
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise
    return outcomes


def _in_savepoint(
    conn: sqlite3.Connection, body: Callable[[Executor], Any], db: Executor
) -> tuple[bool, Any]:
    """One body of a group: its writes undone alone when it raises, what it raised kept."""
    conn.execute("SAVEPOINT body")
    try:
        result = body(db)
    except Exception as exc:
        if not conn.in_transaction:  # SQLite rolled the whole transaction back (disk full)
            raise
        conn.execute("ROLLBACK TO body")
        conn.execute("RELEASE body")
        return (False, exc)
    conn.execute("RELEASE body")
    return (True, result)


def _read(_conn: sqlite3.Connection, body: Callable[[Executor], T], db: Executor) -> T:
    return body(db)


def _raw_transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    return _transaction(conn, fn, conn)


def sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """Every connection the store makes: WAL, and foreign keys enforced."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL survives a process crash
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()
