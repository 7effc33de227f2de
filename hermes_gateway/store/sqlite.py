"""The store's hot path on SQLite: the per-message statements on the engine's own aiosqlite
connection, without SQLAlchemy's per-statement machinery.

Each message writes three times (inbox, turn, "answered"). Through the async engine that is
about 0.5 ms of CPU per transaction (greenlet hops, result wrapping); on the driver connection
it is about 0.1 ms. The engine still opens, pools and migrates the database, and runs every
other query; PostgreSQL uses the engine for everything.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hermes_gateway.store.fence import SQLITE_UPSERT, Fence, refuse
from hermes_gateway.store.models import InboxRow, MessageRow, SessionRow

T = TypeVar("T")
_INBOX = cast(Table, InboxRow.__table__).name
_MSG = cast(Table, MessageRow.__table__).name
_SESSIONS = cast(Table, SessionRow.__table__).name

INBOX_COLUMNS = (
    "platform",
    "chat_id",
    "message_id",
    "session_key",
    "payload",
    "status",
    "accepted_at",
    "updated_at",
    "run_id",
)
MESSAGE_COLUMNS = (
    "session_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "run_id",
    "created_at",
    "user_id",
)
_ACCEPT = f"INSERT INTO {_INBOX} ({', '.join(INBOX_COLUMNS)}) VALUES ({', '.join('?' * 9)})"
_ADD_MESSAGE = f"INSERT INTO {_MSG} ({', '.join(MESSAGE_COLUMNS)}) VALUES ({', '.join('?' * 8)})"
_HISTORY = (
    f"SELECT role, content, tool_calls, tool_call_id FROM {_MSG} WHERE session_id = ? ORDER BY id"
)
_CURRENT_SESSION = (
    f"SELECT id FROM {_SESSIONS} WHERE key = ? AND closed_at IS NULL ORDER BY id DESC LIMIT 1"
)
_NEW_SESSION = f"INSERT INTO {_SESSIONS} (key, created_at) VALUES (?, ?)"
_PREVIEW = f"UPDATE {_INBOX} SET preview = ? WHERE platform = ? AND chat_id = ? AND message_id = ?"


def _in(n: int) -> str:
    return ", ".join("?" * n)


def _fenced(fence: Fence | None, now: float) -> list[tuple[str, Any]]:
    """The fencing check that opens a transaction (`_transaction` refuses a stale token)."""
    return [] if fence is None else [(SQLITE_UPSERT, (fence.session_key, fence.token, now))]


class SqliteFastPath:
    """Owns one pooled connection for the process's life; callers serialize writes."""

    def __init__(self) -> None:
        self._holder: AsyncConnection | None = None
        self._db: Any = None

    @staticmethod
    def usable(driver_connection: Any) -> bool:
        """Whether this aiosqlite has the seams `_commit` uses (it has had them since 0.1)."""
        return callable(getattr(driver_connection, "_execute", None)) and hasattr(
            type(driver_connection), "_conn"
        )

    async def open(self, engine: AsyncEngine) -> bool:
        """Take a connection for the process's life; False (and nothing held) when the
        driver lacks what the fast path needs: the store then runs on the engine alone."""
        self._holder = await engine.connect()
        raw = await self._holder.get_raw_connection()
        if not self.usable(raw.driver_connection):
            await self.close()
            return False
        self._db = raw.driver_connection  # the aiosqlite connection the engine made
        return True

    async def close(self) -> None:
        if self._holder is not None:
            await self._holder.close()
            self._holder = None
            self._db = None

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` in one transaction on aiosqlite's thread, the write lock taken first
        (`BEGIN IMMEDIATE`: it may read before it writes): a module's own hot writes."""
        return cast(T, await self._db._execute(_apply, self._db._conn, fn))

    async def _commit(self, statements: list[tuple[str, Any]]) -> Any:
        """Run statements in one transaction; returns the last cursor's lastrowid.

        The whole transaction runs as one call on aiosqlite's thread: one hop there and back
        instead of one per statement and one for the commit (7 hops per message became 3).
        `_execute` is how aiosqlite's own methods reach that thread; `open` checks it is there.
        """
        return await self._db._execute(_transaction, self._db._conn, statements)

    async def accept(self, row: dict[str, Any]) -> int | None:
        params = tuple(row[c] for c in INBOX_COLUMNS)
        try:
            rowid = await self._commit([(_ACCEPT, params)])
        except sqlite3.IntegrityError:
            return None
        return int(rowid)

    async def mark(
        self, ids: list[int], status: str, reply: str | None, now: float, fence: Fence | None
    ) -> None:
        if reply is None:
            sql = f"UPDATE {_INBOX} SET status = ?, updated_at = ? WHERE id IN ({_in(len(ids))})"
            await self._commit([*_fenced(fence, now), (sql, (status, now, *ids))])
        else:
            sql = (
                f"UPDATE {_INBOX} SET status = ?, reply = ?, updated_at = ? "
                f"WHERE id IN ({_in(len(ids))})"
            )
            await self._commit([*_fenced(fence, now), (sql, (status, reply, now, *ids))])

    async def progress(
        self, ids: list[int], parts_sent: int, now: float, fence: Fence | None
    ) -> None:
        sql = f"UPDATE {_INBOX} SET parts_sent = ?, updated_at = ? WHERE id IN ({_in(len(ids))})"
        await self._commit([*_fenced(fence, now), (sql, (parts_sent, now, *ids))])

    async def intent(
        self, ids: list[int], index: int, after: str, now: float, fence: Fence | None
    ) -> None:
        sql = (
            f"UPDATE {_INBOX} SET parts_sent = ?, sending = ?, sending_after = ?, updated_at = ? "
            f"WHERE id IN ({_in(len(ids))})"
        )
        params = (index, index, after[:128], now, *ids)
        await self._commit([*_fenced(fence, now), (sql, params)])

    async def claim(self, fence: Fence, now: float) -> None:
        await self._commit(_fenced(fence, now))

    async def fly(self, ids: list[int], mark: int) -> None:
        """`InboxGuard.begin_attempt` (1, or 2 on probation) and `undo_attempt` (0)."""
        sql = (
            f"UPDATE {_INBOX} SET in_flight = ? "
            f"WHERE status = 'accepted' AND id IN ({_in(len(ids))})"
        )
        await self._commit([(sql, (mark, *ids))])

    async def remember_preview(self, key: tuple[str, str, str], ref: str) -> None:
        await self._commit([(_PREVIEW, (ref, *key))])

    async def session_id(self, key: str, *, create: bool, now: float) -> int | None:
        rows = await self._db.execute_fetchall(_CURRENT_SESSION, (key,))
        if rows:
            return int(rows[0][0])
        if not create:
            return None
        return int(await self._commit([(_NEW_SESSION, (key, now))]))

    async def complete_turn(
        self,
        session_id: int,
        rows: list[dict[str, Any]],
        ids: list[int],
        settle: tuple[str, str, str, float],
        fence: Fence | None,
    ) -> None:
        statements = _fenced(fence, settle[3])
        if rows:
            statements.append((_ADD_MESSAGE, [tuple(r[c] for c in MESSAGE_COLUMNS) for r in rows]))
        if ids:
            sql = (
                f"UPDATE {_INBOX} SET status = ?, reply = ?, run_id = ?, updated_at = ? "
                f"WHERE id IN ({_in(len(ids))})"
            )
            statements.append((sql, (*settle, *ids)))
        if rows or ids:
            await self._commit(statements)

    async def history(self, session_id: int) -> list[tuple[Any, ...]]:
        return list(await self._db.execute_fetchall(_HISTORY, (session_id,)))


def sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """Every connection the store makes: WAL, and foreign keys enforced."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL survives a process crash
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _transaction(conn: sqlite3.Connection, statements: list[tuple[str, Any]]) -> int | None:
    """On aiosqlite's thread: the statements, then commit; rolled back on any error."""
    try:
        last = None
        for sql, params in statements:
            if isinstance(params, list):
                conn.executemany(sql, params)
            else:
                last = conn.execute(sql, params)
                if sql is SQLITE_UPSERT and last.rowcount != 1:  # a newer token was seen
                    raise refuse(Fence(*params[:2]))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return last.lastrowid if last is not None else None


def _apply(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """On aiosqlite's thread: ``fn`` in a write transaction, committed; rolled back on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return result
