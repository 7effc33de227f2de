"""Durable state through the SQLAlchemy async engine: inbox, sessions and history.

SQLite (WAL, aiosqlite) by default, PostgreSQL (asyncpg) by URL. Every call runs off the event
loop thread (the async drivers do their I/O on their own threads or sockets).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import delete, event, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from hermes_gateway.errors import StoreError
from hermes_gateway.events import Attachment, MessageEvent
from hermes_gateway.models import Base, InboxRow, MessageRow, SessionRow

log = structlog.get_logger("hermes.store")
Message = dict[str, Any]
TERMINAL = ("answered", "dropped", "expired")


@dataclass(frozen=True, slots=True)
class Undelivered:
    """A reply computed before a crash but never confirmed sent."""

    inbox_id: int
    event: MessageEvent
    reply: str
    run_id: str


class Store:
    """The gateway's persistence; one instance per process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        self._is_sqlite = url.startswith("sqlite")
        # SQLite has one writer; serializing writes here avoids "database is locked" retries
        self._write_lock = asyncio.Lock()

    @property
    def is_open(self) -> bool:
        return self._engine is not None

    async def open(self) -> None:
        if self._is_sqlite:
            path = self.url.split("///", 1)[-1]
            if path and path != ":memory:":
                await asyncio.to_thread(Path(path).parent.mkdir, parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {"pool_pre_ping": not self._is_sqlite}
        if self._is_sqlite:
            kwargs["connect_args"] = {"timeout": 30}
        engine = create_async_engine(self.url, **kwargs)
        if self._is_sqlite:
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open the store at {safe_url(self.url)}: {exc}") from exc
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    def _session(self) -> AsyncSession:
        if self._sessions is None:
            raise StoreError("the store is not open")
        return self._sessions()

    async def read(self, fn: Any, *args: Any) -> Any:
        """Run ``await fn(db, *args)`` in a read session (for modules with tables of their own)."""
        try:
            async with self._session() as db:
                return await fn(db, *args)
        except SQLAlchemyError as exc:
            raise StoreError(f"store read failed: {exc.__class__.__name__}: {exc}") from exc

    async def write(self, fn: Any, *args: Any) -> Any:
        """Run ``await fn(db, *args)`` in one serialized write transaction."""
        return await self._write(fn, *args)

    async def _write(self, fn: Any, *args: Any) -> Any:
        async with self._write_lock:
            try:
                async with self._session() as db, db.begin():
                    return await fn(db, *args)
            except IntegrityError:
                raise
            except SQLAlchemyError as exc:
                raise StoreError(f"store write failed: {exc.__class__.__name__}: {exc}") from exc

    # -- inbox ----------------------------------------------------------------------------

    async def accept(self, ev: MessageEvent) -> int | None:
        """Write an inbound message to the inbox; None if it was already there (a redelivery)."""
        now = time.time()
        row = InboxRow(
            platform=ev.platform,
            chat_id=ev.chat_id,
            message_id=ev.message_id,
            session_key=ev.session_key,
            payload=json.dumps(asdict(ev)),
            status="accepted",
            accepted_at=now,
            updated_at=now,
        )

        async def insert(db: AsyncSession) -> int:
            db.add(row)
            await db.flush()
            return row.id

        try:
            result: int = await self._write(insert)
        except IntegrityError:
            return None
        return result

    async def mark(self, inbox_ids: Iterable[int], status: str, reply: str | None = None) -> None:
        ids = list(inbox_ids)
        if not ids:
            return
        values: dict[str, Any] = {"status": status, "updated_at": time.time()}
        if reply is not None:
            values["reply"] = reply

        async def run(db: AsyncSession) -> None:
            await db.execute(update(InboxRow).where(InboxRow.id.in_(ids)).values(**values))

        await self._write(run)

    async def replayable(
        self, max_age_s: float
    ) -> tuple[list[tuple[int, MessageEvent]], list[Undelivered]]:
        """Inbox work left over from the last run; entries too old to replay are expired."""
        cutoff = time.time() - max_age_s

        async def run(db: AsyncSession) -> tuple[list[tuple[int, MessageEvent]], list[Undelivered]]:
            expired = await db.execute(
                update(InboxRow)
                .where(InboxRow.status.in_(("accepted", "done")), InboxRow.accepted_at < cutoff)
                .values(status="expired", updated_at=time.time())
            )
            if expired.rowcount:  # type: ignore[attr-defined]
                log.warning("inbox.expired", count=expired.rowcount, max_age_s=max_age_s)  # type: ignore[attr-defined]
            rows = (
                await db.execute(
                    select(InboxRow)
                    .where(InboxRow.status.in_(("accepted", "done")))
                    .order_by(InboxRow.id)
                )
            ).scalars()
            to_run: list[tuple[int, MessageEvent]] = []
            to_send: list[Undelivered] = []
            for row in rows:
                ev = event_from_json(row.payload)
                if row.status == "done" and row.reply is not None:
                    to_send.append(Undelivered(row.id, ev, row.reply, row.run_id))
                else:
                    to_run.append((row.id, ev))
            return to_run, to_send

        result: tuple[list[tuple[int, MessageEvent]], list[Undelivered]] = await self._write(run)
        return result

    async def prune(self, retention_days: float) -> int:
        cutoff = time.time() - retention_days * 86400

        async def run(db: AsyncSession) -> int:
            res = await db.execute(
                delete(InboxRow).where(InboxRow.status.in_(TERMINAL), InboxRow.updated_at < cutoff)
            )
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

        result: int = await self._write(run)
        return result

    # -- sessions and history -------------------------------------------------------------

    async def history(self, session_key: str) -> list[Message]:
        try:
            async with self._session() as db:
                sid = await _current_session(db, session_key, create=False)
                if sid is None:
                    return []
                rows = (
                    await db.execute(
                        select(MessageRow)
                        .where(MessageRow.session_id == sid)
                        .order_by(MessageRow.id)
                    )
                ).scalars()
                return [_row_to_message(r) for r in rows]
        except SQLAlchemyError as exc:
            raise StoreError(f"store read failed: {exc}") from exc

    async def complete_turn(
        self,
        session_key: str,
        messages: list[Message],
        inbox_ids: Iterable[int],
        reply: str,
        run_id: str,
        status: str = "done",
    ) -> None:
        """Append a turn and settle its inbox entries in one transaction: all or nothing."""
        ids = list(inbox_ids)
        now = time.time()

        async def run(db: AsyncSession) -> None:
            sid = await _current_session(db, session_key, create=True)
            assert sid is not None
            db.add_all(_message_row(sid, m, run_id, now) for m in messages)
            if ids:
                await db.execute(
                    update(InboxRow)
                    .where(InboxRow.id.in_(ids))
                    .values(status=status, reply=reply, run_id=run_id, updated_at=now)
                )

        await self._write(run)

    async def reset_session(self, session_key: str) -> None:
        """Close the current session of this key; the next message starts a fresh one."""

        async def run(db: AsyncSession) -> None:
            await db.execute(
                update(SessionRow)
                .where(SessionRow.key == session_key, SessionRow.closed_at.is_(None))
                .values(closed_at=time.time())
            )

        await self._write(run)


async def _current_session(db: AsyncSession, key: str, *, create: bool) -> int | None:
    sid = (
        await db.execute(
            select(SessionRow.id)
            .where(SessionRow.key == key, SessionRow.closed_at.is_(None))
            .order_by(SessionRow.id.desc())
            .limit(1)
        )
    ).scalar()
    if sid is None and create:
        row = SessionRow(key=key, created_at=time.time())
        db.add(row)
        await db.flush()
        sid = row.id
    return sid


def _message_row(session_id: int, msg: Message, run_id: str, now: float) -> MessageRow:
    calls = msg.get("tool_calls")
    content = msg.get("content")
    return MessageRow(
        session_id=session_id,
        role=msg["role"],
        content=content if isinstance(content, str) or content is None else json.dumps(content),
        tool_calls=json.dumps(calls) if calls else None,
        tool_call_id=msg.get("tool_call_id"),
        run_id=run_id,
        created_at=now,
    )


def _row_to_message(row: MessageRow) -> Message:
    msg: Message = {"role": row.role, "content": row.content}
    if row.tool_calls:
        msg["tool_calls"] = json.loads(row.tool_calls)
    if row.tool_call_id:
        msg["tool_call_id"] = row.tool_call_id
    return msg


def event_from_json(payload: str) -> MessageEvent:
    data = json.loads(payload)
    data["attachments"] = tuple(Attachment(**a) for a in data.get("attachments") or ())
    return MessageEvent(**data)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL survives a process crash
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def safe_url(url: str) -> str:
    """The store URL without its password, for logs and reports."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
