"""The store's engine room: the async engine (opened once `store_migrate` has brought the schema
to this release's revision), serialized write transactions, the owned SQLite writer, and the
circuit (circuit.py) that fails calls at once while the database is stuck or unreachable.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog
from sqlalchemy import Connection, event, make_url, text
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from hermes_gateway.errors import StoreError
from hermes_gateway.store import hotpath
from hermes_gateway.store import migrate as store_migrate
from hermes_gateway.store.circuit import StoreCircuit
from hermes_gateway.store.executor import EngineExecutor, Executor
from hermes_gateway.store.group import GroupCommit
from hermes_gateway.store.hotpath import HotPath
from hermes_gateway.store.sqlite import SqliteFastPath, sqlite_pragmas
from hermes_gateway.store.writes import DatabaseFileGone

log = structlog.get_logger("hermes.store")
T = TypeVar("T")


CONNECT_TIMEOUT_S = 10.0  # asyncpg waits 60 s for a server that does not answer
# What a failing driver raises: asyncpg lets OSError (refused, TimeoutError) out of `connect`
# unwrapped, and a stopped PostgreSQL server must fail a call like any other database error.
DRIVER_ERRORS = (SQLAlchemyError, OSError)


class StoreEngine:
    """Connections and transactions; `Store` builds the gateway's queries on top."""

    # How long a statement waits for a lock another process holds: SQLite's busy timeout, and
    # PostgreSQL's lock_timeout (unset, PostgreSQL waits forever, and so did every write).
    lock_wait_s = 30.0

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        self._is_sqlite = url.startswith("sqlite")
        # SQLite has one writer; serializing writes here avoids "database is locked" retries
        self._write_lock = asyncio.Lock()
        # the per-message path's writes waiting or under way: background writes let them by
        self._hot_writes = 0
        self._hot_idle = asyncio.Event()
        self._hot_idle.set()
        self._hot_turn = _HotTurn(self)
        self._fast: SqliteFastPath | None = None
        self._groups: GroupCommit | None = None  # the owned writer's per-message writes
        self._probe_engine: AsyncEngine | None = None
        self.circuit = StoreCircuit(None, self._write_probe)
        self._file: tuple[str, int, int] | None = None  # SQLite: path, device, inode at open
        self._file_watch: asyncio.Task[None] | None = None

    @property
    def problem(self) -> str | None:
        """What keeps the store from working right now (for `/readyz`), or None."""
        return self.circuit.problem

    @property
    def is_open(self) -> bool:
        return self._engine is not None

    async def open(self) -> None:
        if self._is_sqlite:
            path = self.url.split("///", 1)[-1]
            if path and path != ":memory:":
                await asyncio.to_thread(Path(path).parent.mkdir, parents=True, exist_ok=True)
        kwargs = engine_options(self.url, self.lock_wait_s)
        engine = create_async_engine(self.url, pool_pre_ping=not self._is_sqlite, **kwargs)
        if self._is_sqlite:
            event.listen(engine.sync_engine, "connect", sqlite_pragmas)
        # an in-memory database exists on the engine's one connection only
        own = engine if store_migrate.in_memory(self.url) else None
        try:
            before, after = await store_migrate.run(self.url, kwargs, store_migrate.upgrade, own)
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open the store at {safe_url(self.url)}: {exc}") from exc
        if before != after:
            log.info("store.migrated", before=before.describe(), after=after.describe())
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        if not self._is_sqlite:
            # its own connection each time: a pooled one may be the one hanging
            self._probe_engine = create_async_engine(self.url, poolclass=NullPool, **kwargs)
            self.circuit = StoreCircuit(self._probe, self._write_probe)
        if self._is_sqlite:
            await self._watch_file()
        if self._file is not None:  # a database in a file: the owned writer can share it
            await self._open_writer(self._file[0])

    async def _open_writer(self, path: str) -> None:
        fast = SqliteFastPath(path, self.lock_wait_s)
        try:
            opened = await fast.open(hotpath.warm_up())
        except sqlite3.Error as exc:
            await fast.close()
            raise StoreError(f"cannot open the store at {safe_url(self.url)}: {exc}") from exc
        if opened:
            self._fast = fast
            self._groups = GroupCommit(fast.group, self._write_lock)
        else:
            log.warning("store.fast_path_unavailable", reason="the database is not in WAL mode")

    async def _watch_file(self) -> None:
        path = make_url(self.url).database
        if not path or path == ":memory:" or path.startswith("file:"):
            return
        st = await asyncio.to_thread(os.stat, path)
        self._file = (path, st.st_dev, st.st_ino)
        self._file_watch = asyncio.create_task(self._check_file_every(1.0), name="store-file")

    def _check_file(self) -> None:
        """Raise `DatabaseFileGone` when the file at the store's path is not the one open."""
        if self._file is None:
            return
        path, dev, ino = self._file
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise DatabaseFileGone(f"database file deleted: {path}") from None
        if (st.st_dev, st.st_ino) != (dev, ino):
            raise DatabaseFileGone(f"database file replaced: {path}")

    async def _check_file_every(self, seconds: float) -> None:
        # writes to a deleted file succeed, so only looking tells: a restart would not find them
        while True:
            await asyncio.sleep(seconds)
            try:
                await asyncio.to_thread(self._check_file)
            except DatabaseFileGone as exc:
                self.circuit.writes.close(
                    str(exc),
                    "restart the gateway to open the file at its path (a new, empty one if none)",
                    file_gone=True,
                )
            except OSError as exc:
                log.warning("store.file_check_failed", error=repr(exc))

    async def _write_probe(self) -> None:
        """A real committed write (SQLite: the header's user_version, unused otherwise)."""
        await asyncio.to_thread(self._check_file)
        assert self._engine is not None
        statement = "PRAGMA user_version = 0" if self._is_sqlite else "SELECT txid_current()"
        async with self._write_lock, self._engine.begin() as conn:
            await conn.execute(text(statement))

    async def _probe(self) -> None:
        assert self._probe_engine is not None
        async with self._probe_engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def close(self) -> None:
        if self._file_watch is not None:
            self._file_watch.cancel()
            await asyncio.gather(self._file_watch, return_exceptions=True)
            self._file_watch = None
        await self.circuit.close()
        if self._probe_engine is not None:
            await self._probe_engine.dispose()
            self._probe_engine = None
        if self._groups is not None:
            await self._groups.close()
            self._groups = None
        if self._fast is not None:
            await self._fast.close()
            self._fast = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    def _session(self) -> AsyncSession:
        if self._sessions is None:
            raise StoreError("the store is not open")
        return self._sessions()

    async def read(self, fn: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """Run ``await fn(db)`` in a read session (for modules with tables of their own)."""
        started = self.circuit.check(write=False)
        try:
            async with self.circuit.watch(), self._session() as db:
                return await fn(db)
        except DRIVER_ERRORS as exc:
            raise self.circuit.failed(exc, started, "read") from exc

    async def write(
        self, fn: Callable[[AsyncSession], Awaitable[T]], *, background: bool = False
    ) -> T:
        """Run ``await fn(db)`` in one serialized write transaction. A ``background`` write
        (a scheduled job's) lets every chat write waiting for the lock go first."""
        await (self._background_turn() if background else self._write_lock.acquire())
        try:
            started = self.circuit.check()
            try:
                async with self.circuit.watch(), self._session() as db, db.begin():
                    result = await fn(db)
                self.circuit.wrote()
                return result
            except IntegrityError:
                raise
            except DRIVER_ERRORS as exc:
                raise self.circuit.failed(exc, started) from exc
        finally:
            self._write_lock.release()

    @property
    def sqlite_fast(self) -> bool:
        """Whether `write_sqlite` is available: SQLite, with the owned writer open."""
        return self._fast is not None

    async def write_sqlite(self, fn: Callable[[Executor], T]) -> T:
        """A background write (as `write`) on the owned SQLite writer: ``fn`` runs on its
        thread in one transaction, each statement compiled once (a scheduled job's state
        changes: well under a millisecond instead of several through a session)."""
        if self._fast is None:
            raise StoreError("the SQLite writer is not open")
        await self._background_turn()
        try:
            started = self.circuit.check()
            try:
                result = await self._fast.transaction(fn)
            except sqlite3.IntegrityError:
                raise
            except sqlite3.Error as exc:
                raise self.circuit.failed(exc, started) from exc
            self.circuit.wrote()
            return result
        finally:
            self._write_lock.release()

    async def background(self, body: Callable[[Executor], T]) -> T:
        """``body`` as one background write transaction: on the owned SQLite writer when it is
        open (`write_sqlite`), else on an engine session (`write`). A unique key refusing a
        row raises sqlite3's IntegrityError on the first, SQLAlchemy's on the second."""
        if self._fast is not None:
            return await self.write_sqlite(body)
        return await self.write(lambda db: db.run_sync(_on_session, body), background=True)

    async def _background_turn(self) -> None:
        """Take the write lock once no per-message write waits for it (one that queued after
        this one is let by: the lock is handed on, and taken again after it)."""
        while True:
            await self._hot_idle.wait()
            await self._write_lock.acquire()
            if not self._hot_writes:
                return
            self._write_lock.release()

    async def _hot(self, fn: Callable[[HotPath], Awaitable[T]], *, read: bool = False) -> T:
        """The per-message path's calls, on the executor chosen at open: the owned SQLite
        writer (one transaction per call), else one engine transaction for all of them
        (PostgreSQL; SQLite in memory or not in WAL mode)."""
        fast = self._fast
        if fast is not None:
            return await self._fast_tx(fast, fn, read=read)

        async def on_engine(conn: AsyncConnection) -> T:
            return await fn(HotPath(_EngineTransact(conn)))

        return await (self._query(on_engine) if read else self._tx(on_engine))

    async def _tx(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """One serialized write transaction on a bare connection (Core, no ORM unit of work:
        the hot path writes three times per message, so the ORM's overhead would dominate)."""
        if self._engine is None:
            raise StoreError("the store is not open")
        async with self._hot_lock():
            started = self.circuit.check()
            try:
                async with self.circuit.watch(), self._engine.begin() as conn:
                    result = await fn(conn)
                self.circuit.wrote()
                return result
            except IntegrityError:
                raise
            except DRIVER_ERRORS as exc:
                raise self.circuit.failed(exc, started) from exc

    async def _fast_tx(
        self, fast: SqliteFastPath, fn: Callable[[HotPath], Awaitable[T]], *, read: bool
    ) -> T:
        """Like `_tx`, on the owned SQLite writer. A read is never skipped while writes are:
        WAL readers do not wait for another process's writer, and a session's history must
        load. Writes go through `GroupCommit`: those queued while one commits share the next
        transaction (each body in a savepoint), which takes the write lock for them all."""
        if read:
            async with self._hot_lock():
                started = self.circuit.check(write=False)
                try:
                    return await fn(HotPath(fast.transaction))
                except sqlite3.Error as exc:
                    raise self.circuit.failed(exc, started, "read") from exc
        assert self._groups is not None
        self._hot_turn.arrive()  # background writes wait until no per-message one does
        try:
            started = self.circuit.check()
            try:
                result = await fn(HotPath(_Grouped(self._groups, fast)))
            except sqlite3.IntegrityError:  # a redelivery, for the caller to answer
                raise
            except sqlite3.Error as exc:
                raise self.circuit.failed(exc, started, "write") from exc
            self.circuit.wrote()
            return result
        finally:
            self._hot_turn.leave()

    def _hot_lock(self) -> _HotTurn:
        return self._hot_turn

    async def _query(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        if self._engine is None:
            raise StoreError("the store is not open")
        started = self.circuit.check(write=False)
        try:
            async with self.circuit.watch(), self._engine.connect() as conn:
                return await fn(conn)
        except DRIVER_ERRORS as exc:
            raise self.circuit.failed(exc, started, "read") from exc


class _EngineTransact:
    """`hotpath.Transact` on an engine connection: every body runs in the transaction `_tx`
    (or `_query`) opened, on the connection's sync facade (one greenlet hop per body)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def __call__(self, body: Callable[[Executor], T], *, write: bool = True) -> T:
        return await self._conn.run_sync(_on_connection, body)


class _Grouped:
    """`hotpath.Transact` on the owned SQLite writer: a write joins the next group commit; a
    read (no transaction) is one hop to the writer's thread."""

    __slots__ = ("_fast", "_groups")

    def __init__(self, groups: GroupCommit, fast: SqliteFastPath) -> None:
        self._groups = groups
        self._fast = fast

    async def __call__(self, body: Callable[[Executor], T], *, write: bool = True) -> T:
        if write:
            return await self._groups.transaction(body)
        return await self._fast.transaction(body, write=False)


def _on_connection(conn: Connection, body: Callable[[Executor], T]) -> T:
    return body(EngineExecutor(conn))


def _on_session(session: Session, body: Callable[[Executor], T]) -> T:
    return body(EngineExecutor(session.connection()))


class _HotTurn:
    """The write lock for one per-message transaction, counted so a background write waits
    until none is waiting (`_background_turn`). A class rather than an `asynccontextmanager`:
    it is entered about five times per message, and a generator-based one costs about ten
    more calls on the event loop each time."""

    __slots__ = ("_engine",)

    def __init__(self, engine: StoreEngine) -> None:
        self._engine = engine

    async def __aenter__(self) -> None:
        self.arrive()
        try:
            await self._engine._write_lock.acquire()
        except BaseException:
            self.leave()
            raise

    async def __aexit__(self, *_exc: object) -> None:
        self._engine._write_lock.release()
        self.leave()

    def arrive(self) -> None:
        """A per-message write waits or is under way (a group commit takes the lock)."""
        engine = self._engine
        engine._hot_writes += 1
        engine._hot_idle.clear()

    def leave(self) -> None:
        engine = self._engine
        engine._hot_writes -= 1
        if not engine._hot_writes:
            engine._hot_idle.set()


def engine_options(url: str, lock_wait_s: float) -> dict[str, Any]:
    """How the store connects: how long a statement waits for another process's lock, and
    (PostgreSQL) for a server that does not answer. Statement parameters (users' messages)
    never appear in SQLAlchemy's logs or error texts."""
    quiet = {"hide_parameters": True}
    if url.startswith("sqlite"):
        return {**quiet, "connect_args": {"timeout": lock_wait_s}}
    if "+asyncpg" in url:
        lock_timeout = str(int(lock_wait_s * 1000))  # milliseconds
        return {
            **quiet,
            "connect_args": {
                "timeout": CONNECT_TIMEOUT_S,
                "server_settings": {"lock_timeout": lock_timeout},
            },
        }
    return quiet


def safe_url(url: str) -> str:
    """The store URL without its password, for logs and reports."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
