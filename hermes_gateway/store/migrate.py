"""The store's schema revision: the Alembic migrations in `migrations/`, run once when the store
opens (and by `hermes db upgrade`), one opener at a time, on the driver's thread or socket."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, event, inspect, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from hermes_gateway.errors import StoreError
from hermes_gateway.store.archive_index import INDEX_DDL as MEMORY_DDL
from hermes_gateway.store.archive_index import pgvector_ddl
from hermes_gateway.store.migrations import HEAD
from hermes_gateway.store.models import Base
from hermes_gateway.store.search import INDEX_DDL
from hermes_gateway.store.sqlite import sqlite_pragmas

if TYPE_CHECKING:
    from alembic.config import Config

T = TypeVar("T")
MIGRATIONS = Path(__file__).with_name("migrations")
# Releases before revisions made their tables with `create_all` and added later columns at
# open. Such a database is upgraded from nothing, and each revision makes only what is missing,
# so whichever of those releases made it (or opened it last), it reaches the head.
_PG_LOCK_KEY = 0x6865726D6573  # "hermes": PostgreSQL runs one opener's migrations at a time


@dataclass(frozen=True, slots=True)
class Revision:
    """Where a database's schema stands: ``current`` is None for an empty database or for one
    made before revisions (``unversioned``: it has the tables, not the revision)."""

    current: str | None
    head: str
    unversioned: bool = False

    def describe(self) -> str:
        if self.current is not None:
            return self.current
        return "unversioned (made by a release before revisions)" if self.unversioned else "empty"


@functools.cache
def head() -> str:
    """The newest revision this release ships, as Alembic reads the scripts."""
    from alembic.script import ScriptDirectory

    found = ScriptDirectory.from_config(_config()).get_current_head()
    assert found is not None
    return found


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def current(conn: Connection) -> Revision:
    """The revision of the database on ``conn``."""
    from alembic.runtime.migration import MigrationContext

    found = MigrationContext.configure(conn).get_current_revision()
    unversioned = found is None and inspect(conn).has_table("inbox")
    return Revision(found, head(), unversioned)


def upgrade(conn: Connection) -> tuple[Revision, Revision]:
    """Bring the database on ``conn`` to the head in ``conn``'s transaction, under a lock that
    keeps a second opener waiting (PostgreSQL: an advisory lock; SQLite: `BEGIN IMMEDIATE`,
    see `_begin_immediate`); returns the revision before and after."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    stamped = _stamped(conn)
    at_head = Revision(HEAD, HEAD)
    if stamped == HEAD:  # the common case: no Alembic import at all
        return at_head, at_head
    if stamped is None and not inspect(conn).get_table_names():
        _create_at_head(conn)  # a new database: today's schema in one step, no Alembic
        return Revision(None, HEAD), at_head
    from alembic import command
    from alembic.util import CommandError

    before = current(conn)
    if before.current == before.head:
        return before, before
    try:
        command.upgrade(_config(conn), "head")
    except CommandError as exc:  # a revision this release does not know: a newer release's
        raise StoreError(
            f"the database is at schema revision {before.current}, which this release does not "
            f"know (its newest is {before.head}): run the release that upgraded it"
        ) from exc
    return before, current(conn)


def _create_at_head(conn: Connection) -> None:
    """The models' tables, the search index, and the head recorded as Alembic records it (a
    test checks the result against a database the revisions built)."""
    Base.metadata.create_all(conn)
    for ddl in INDEX_DDL[conn.dialect.name] + MEMORY_DDL[conn.dialect.name]:
        conn.exec_driver_sql(ddl)
    if conn.dialect.name == "postgresql":
        pgvector_ddl(conn)  # where the server has it (no rows yet: no index until vectors come)
    conn.execute(
        text(
            "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
            "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
        )
    )
    conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": HEAD})


def _stamped(conn: Connection) -> str | None:
    """The revision recorded in the database, read with plain SQL; None when there is none."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
    return str(row[0]) if row is not None else None


async def run(
    url: str,
    options: dict[str, Any],
    fn: Callable[[Connection], T],
    engine: AsyncEngine | None = None,
) -> T:
    """Run ``fn(connection)`` in one transaction on a connection of its own (SQLite: a write
    transaction from its first statement, so a second opener waits for the first), or on
    ``engine``'s (an in-memory database: no other opener can see it)."""
    if engine is not None:
        async with engine.begin() as conn:
            return await conn.run_sync(fn)
    own = create_async_engine(url, poolclass=NullPool, **options)
    if own.dialect.name == "sqlite":
        event.listen(own.sync_engine, "connect", _driver_transactions)
        event.listen(own.sync_engine, "begin", _begin_immediate)
    try:
        conn = await _connect(own, options.get("connect_args", {}).get("timeout", 5.0))
        try:
            async with conn.begin():
                return await conn.run_sync(fn)
        finally:
            await conn.close()
    finally:
        await own.dispose()


async def _connect(engine: AsyncEngine, wait_s: float) -> AsyncConnection:
    """A connection of ``engine``, tried again for up to ``wait_s`` while SQLite says "database
    is locked": two openers switching a fresh file to WAL at once make one fail at once, never
    waiting out the busy timeout (SQLite's deadlock avoidance); the next try finds it in WAL."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await engine.connect()
        except OperationalError as exc:
            locked = engine.dialect.name == "sqlite" and "database is locked" in str(exc)
            if not locked or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)


def in_memory(url: str) -> bool:
    """An SQLite URL without a file (`sqlite://`, `:memory:`, `mode=memory`)."""
    if not url.startswith("sqlite"):
        return False
    path = url.split("://", 1)[-1].lstrip("/")
    return path in ("", ":memory:") or "mode=memory" in url


def _driver_transactions(dbapi_conn: Any, record: Any) -> None:
    sqlite_pragmas(dbapi_conn, record)
    dbapi_conn.isolation_level = None  # the driver's implicit BEGIN would come too late


def _begin_immediate(conn: Connection) -> None:
    # SQLite's write lock from the start: a second opener's BEGIN waits (busy timeout) until
    # the first commits, then finds the head and does nothing; its DDL is transactional
    conn.exec_driver_sql("BEGIN IMMEDIATE")
