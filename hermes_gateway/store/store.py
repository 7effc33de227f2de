"""Durable state through the SQLAlchemy async engine: inbox, sessions and history.

SQLite (WAL, aiosqlite) by default, PostgreSQL (asyncpg) by URL. The per-message calls go
through `HotPath` (hotpath.py); every call runs off the event loop thread.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

import structlog
from sqlalchemy import ColumnElement, Table, and_, delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from agent_core.context import restore as restore_compacted
from hermes_gateway.events import MessageEvent, OutboundFile
from hermes_gateway.store.fence import Fence
from hermes_gateway.store.hotpath import HotPath
from hermes_gateway.store.inbox import InboxGuard, Quarantined, event_from_json
from hermes_gateway.store.models import InboxRow, MessageRow, SessionRow
from hermes_gateway.store.search import WORD, Hit, search_statement

log = structlog.get_logger("hermes.store")
Message = dict[str, Any]
TERMINAL = ("answered", "dropped", "expired", "undeliverable")
_INBOX = cast(Table, InboxRow.__table__)
_MSG = cast(Table, MessageRow.__table__)
_SESSIONS = cast(Table, SessionRow.__table__)
_SID_CACHE = 4096
_REPLAY_COLUMNS = (
    "id",
    "status",
    "payload",
    "reply",
    "run_id",
    "parts_sent",
    "sending",
    "sending_after",
    "reply_files",
    "trace",
)


@dataclass(frozen=True, slots=True)
class Undelivered:
    """A reply computed before a crash but never confirmed sent."""

    inbox_id: int
    event: MessageEvent
    reply: str
    run_id: str
    parts_sent: int = 0  # of a reply in several parts: these went out before the crash
    # the next part's send had begun: it may be out (the reference it comes after), else None
    doubt: str | None = None
    files: tuple[OutboundFile, ...] = ()  # sent after the text, a part each (`send_file`)


class Store(InboxGuard):
    """The gateway's persistence: inbox, sessions and history; one instance per process."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._sids: OrderedDict[str, int] = OrderedDict()  # session key -> current session row

    # -- inbox ----------------------------------------------------------------------------

    async def accept(self, ev: MessageEvent) -> int | None:
        """Write an inbound message to the inbox; None if it was already there (a redelivery)."""
        now = time.time()
        payload = asdict(ev)
        trace = payload.pop("trace") or None  # a column: a payload an older reader can read
        row = {
            "platform": ev.platform,
            "chat_id": ev.chat_id,
            "message_id": ev.message_id,
            "session_key": ev.session_key,
            "payload": json.dumps(payload),
            "status": "accepted",
            "accepted_at": now,
            "updated_at": now,
            "run_id": "",
            "trace": trace,
        }
        try:
            return await self._hot(lambda db: db.accept(row))
        except (IntegrityError, sqlite3.IntegrityError):  # the unique key: a redelivery
            return None

    async def mark(
        self,
        inbox_ids: Iterable[int],
        status: str,
        reply: str | None = None,
        *,
        fence: Fence | None = None,
    ) -> None:
        """Move entries to ``status``; under a ``fence``, `FencedOut` and nothing written when
        another instance has since taken the session (so for `progress` and `complete_turn`)."""
        ids = list(inbox_ids)
        if not ids:
            return
        now = time.time()
        await self._hot(lambda db: db.mark(ids, status, reply, now, fence))

    async def progress(
        self, inbox_ids: list[int], parts_sent: int, *, fence: Fence | None = None
    ) -> None:
        """Record that the first ``parts_sent`` parts of the entries' reply went out."""
        now = time.time()
        await self._hot(lambda db: db.progress(inbox_ids, parts_sent, now, fence))

    async def intent(
        self, inbox_ids: list[int], index: int, after: str, *, fence: Fence | None = None
    ) -> None:
        """Record, before it can reach the platform, that part ``index`` of the entries' reply
        is being sent (so the ones before it went out), after the platform reference ``after``:
        a crash now leaves that part in doubt, and the replay has the adapter check it."""
        now = time.time()
        await self._hot(lambda db: db.intent(inbox_ids, index, after, now, fence))

    async def claim(self, fence: Fence) -> None:
        """A new session lease: record its token before reading the session's inbox, so a
        write under any older token fails from now on (`FencedOut` if this one is stale)."""
        now = time.time()
        await self._hot(lambda db: db.claim(fence, now))

    async def remember_preview(self, ev: MessageEvent, ref: str) -> None:
        """Record where the live preview answering ``ev`` is (its platform message reference)."""
        key = (ev.platform, ev.chat_id, ev.message_id)
        await self._hot(lambda db: db.remember_preview(key, ref))

    async def previews(self, inbox_ids: list[int]) -> dict[int, str]:
        """The live previews recorded for these entries (at start: the ones a crash cut short)."""
        if not inbox_ids:
            return {}
        stmt = select(_INBOX.c.id, _INBOX.c.preview).where(
            _INBOX.c.id.in_(inbox_ids), _INBOX.c.preview.is_not(None)
        )

        async def run(conn: AsyncConnection) -> dict[int, str]:
            return {int(i): str(ref) for i, ref in await conn.execute(stmt)}

        return await self._query(run)

    async def replayable(
        self, max_age_s: float, session_key: str | None = None
    ) -> tuple[list[tuple[int, MessageEvent]], list[Undelivered]]:
        """Inbox work left over from the last run (of one session: a cluster takeover);
        entries too old to replay are expired."""
        cutoff = time.time() - max_age_s
        open_states: ColumnElement[bool] = _INBOX.c.status.in_(("accepted", "done"))
        if session_key is not None:
            open_states = and_(open_states, _INBOX.c.session_key == session_key)

        async def run(
            conn: AsyncConnection,
        ) -> tuple[list[tuple[int, MessageEvent]], list[Undelivered]]:
            expired = await conn.execute(
                update(_INBOX)
                .where(open_states, _INBOX.c.accepted_at < cutoff)
                .values(status="expired", updated_at=time.time())
            )
            if expired.rowcount:
                log.warning("inbox.expired", count=expired.rowcount, max_age_s=max_age_s)
            rows = await conn.execute(
                select(*(_INBOX.c[name] for name in _REPLAY_COLUMNS))
                .where(open_states)
                .order_by(_INBOX.c.id)
            )
            to_run: list[tuple[int, MessageEvent]] = []
            to_send: list[Undelivered] = []
            for inbox_id, status, payload, reply, run_id, parts, sending, after, files, tp in rows:
                ev = event_from_json(payload, tp)
                if status == "done" and reply is not None:
                    doubt = (after or "") if sending is not None and sending == parts else None
                    undelivered = Undelivered(inbox_id, ev, reply, run_id, parts or 0, doubt)
                    to_send.append(replace(undelivered, files=files_from_json(files)))
                else:
                    to_run.append((inbox_id, ev))
            return to_run, to_send

        return await self._tx(run)

    async def accepted(self, inbox_id: int) -> MessageEvent | None:
        """The entry's message while it is unanswered (status accepted), else None."""
        stmt = select(_INBOX.c.payload, _INBOX.c.trace).where(
            _INBOX.c.id == inbox_id, _INBOX.c.status == "accepted"
        )

        async def run(conn: AsyncConnection) -> MessageEvent | None:
            row = (await conn.execute(stmt)).first()
            return None if row is None else event_from_json(row[0], row[1])

        return await self._query(run)

    async def entry_of(self, ev: MessageEvent) -> int | None:
        """The inbox id ``ev`` was stored under (its platform, chat and message id), or None:
        a retry told it is a duplicate finds the first copy's entry to wait on."""
        stmt = select(_INBOX.c.id).where(
            _INBOX.c.platform == ev.platform,
            _INBOX.c.chat_id == ev.chat_id,
            _INBOX.c.message_id == ev.message_id,
        )

        async def run(conn: AsyncConnection) -> int | None:
            found = (await conn.execute(stmt)).scalar()
            return None if found is None else int(found)

        return await self._query(run)

    async def settled(self, inbox_id: int) -> tuple[str, str, str, str] | None:
        """The entry's session key, status, stored reply ("" if none) and run id; None if there
        is no such entry (a cluster instance asking where another's request ended up)."""
        columns = (_INBOX.c.session_key, _INBOX.c.status, _INBOX.c.reply, _INBOX.c.run_id)
        stmt = select(*columns).where(_INBOX.c.id == inbox_id)

        async def run(conn: AsyncConnection) -> tuple[str, str, str, str] | None:
            row = (await conn.execute(stmt)).first()
            if row is None:
                return None
            key, status, reply, run_id = row
            return str(key), str(status), str(reply or ""), str(run_id or "")

        return await self._query(run)

    async def unanswered(
        self, *, older_than_s: float, max_age_s: float, session_key: str | None = None
    ) -> list[tuple[int, MessageEvent]]:
        """Unanswered entries (to run, or their reply to send) accepted between ``max_age_s``
        and ``older_than_s`` ago, oldest first: what a cluster instance may take over."""
        now = time.time()
        where = [
            _INBOX.c.status.in_(("accepted", "done")),
            _INBOX.c.accepted_at <= now - older_than_s,
            _INBOX.c.accepted_at >= now - max_age_s,
        ]
        if session_key is not None:
            where.append(_INBOX.c.session_key == session_key)
        stmt = select(_INBOX.c.id, _INBOX.c.payload).where(*where).order_by(_INBOX.c.id).limit(1000)

        async def run(conn: AsyncConnection) -> list[tuple[int, MessageEvent]]:
            return [(int(i), event_from_json(p)) for i, p in await conn.execute(stmt)]

        return await self._query(run)

    async def prune(self, retention_days: float) -> int:
        cutoff = time.time() - retention_days * 86400
        stmt = delete(_INBOX).where(_INBOX.c.status.in_(TERMINAL), _INBOX.c.updated_at < cutoff)

        async def run(conn: AsyncConnection) -> int:
            return int((await conn.execute(stmt)).rowcount or 0)

        return await self._tx(run)

    # -- sessions and history -------------------------------------------------------------

    async def history(self, session_key: str) -> list[Message]:
        async def run(db: HotPath) -> list[Message]:
            sid = await self._session_id(db, session_key, create=False)
            return [] if sid is None else [_to_message(*r) for r in await db.history(sid)]

        return restore_compacted(await self._hot(run, read=True))

    async def search_messages(
        self, session_key: str, query: str, limit: int = 10, user_id: str | None = None
    ) -> list[Hit]:
        """Full-text search over the user and assistant messages of every session of this key
        (earlier conversations too), best first: all the words, else any of them. With
        ``user_id``, only that user's turns (a session several users share)."""
        words = WORD.findall(query)[:20]
        if not words:
            return []
        for mode in ("all", "any"):

            async def run(conn: AsyncConnection, mode: str = mode) -> list[Hit]:
                stmt, params = search_statement(self._is_sqlite, words, mode, user_id)
                params.update(key=session_key, limit=limit)
                rows = await conn.execute(stmt, params)
                return [Hit(float(r[0]), r[1], r[2] or "", bool(r[3])) for r in rows]

            hits: list[Hit] = await self._query(run)
            if hits or len(words) == 1:
                return hits
        return []

    async def complete_turn(
        self,
        session_key: str,
        messages: list[Message],
        inbox_ids: Iterable[int],
        reply: str,
        run_id: str,
        status: str = "done",
        user_id: str = "",
        *,
        fence: Fence | None = None,
        files: tuple[OutboundFile, ...] = (),
    ) -> None:
        """Append a turn and settle its inbox entries in one transaction: all or nothing.
        ``user_id``: whose turn it is ("" when several users' messages were merged); ``files``:
        what the reply sends after its text, kept with it for a replay."""
        ids = list(inbox_ids)
        now = time.time()
        stored = json.dumps([asdict(f) for f in files]) if files else None

        async def run(db: HotPath) -> None:
            sid = await self._session_id(db, session_key, create=True)
            assert sid is not None
            rows = [_message_row(sid, m, run_id, now, user_id) for m in messages]
            await db.complete_turn(sid, rows, ids, (status, reply, run_id, now, stored), fence)

        try:
            await self._hot(run)
        except BaseException:
            # the engine may have made the session row in the transaction rolled back
            self._sids.pop(session_key, None)
            raise

    async def reset_session(self, session_key: str) -> None:
        """Close the current session of this key; the next message starts a fresh one."""
        stmt = (
            update(_SESSIONS)
            .where(_SESSIONS.c.key == session_key, _SESSIONS.c.closed_at.is_(None))
            .values(closed_at=time.time())
        )
        self._sids.pop(session_key, None)
        await self._tx(lambda conn: conn.execute(stmt))

    def forget_session(self, session_key: str) -> None:
        """Drop what this process remembers of the key's current session row: in a cluster,
        another instance may start a new one (`/new`) while this one does not hold it."""
        self._sids.pop(session_key, None)

    async def _session_id(self, db: HotPath, key: str, *, create: bool) -> int | None:
        """The current session row of ``key``; remembered, since it changes only on /new."""
        sid = self._cached_sid(key)
        if sid is None:
            sid = self._remember_sid(key, await db.session_id(key, create=create, now=time.time()))
        return sid

    def _cached_sid(self, key: str) -> int | None:
        sid = self._sids.get(key)
        if sid is not None:
            self._sids.move_to_end(key)
        return sid

    def _remember_sid(self, key: str, sid: int | None) -> int | None:
        if sid is not None:
            self._sids[key] = sid
            if len(self._sids) > _SID_CACHE:
                self._sids.popitem(last=False)
        return sid


def files_from_json(raw: str | None) -> tuple[OutboundFile, ...]:
    """The files a stored reply sends (the ``reply_files`` column); none when unreadable."""
    if not raw:
        return ()
    try:
        return tuple(OutboundFile(**f) for f in json.loads(raw))
    except (ValueError, TypeError) as exc:
        log.error("inbox.files_unreadable", error=str(exc))
        return ()


def _message_row(
    session_id: int, msg: Message, run_id: str, now: float, user_id: str = ""
) -> dict[str, Any]:
    calls = msg.get("tool_calls")
    content = msg.get("content")
    return {
        "session_id": session_id,
        "role": msg["role"],
        "content": content if isinstance(content, str) or content is None else json.dumps(content),
        "tool_calls": json.dumps(calls) if calls else None,
        "tool_call_id": msg.get("tool_call_id"),
        "run_id": run_id,
        "created_at": now,
        "user_id": user_id,
    }


def _to_message(
    role: str, content: str | None, tool_calls: str | None, tool_call_id: str | None
) -> Message:
    msg: Message = {"role": role, "content": content}
    if tool_calls:
        msg["tool_calls"] = json.loads(tool_calls)
    if tool_call_id:
        msg["tool_call_id"] = tool_call_id
    return msg


__all__ = ["Fence", "Quarantined", "Store", "Undelivered", "event_from_json"]
