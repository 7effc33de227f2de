"""The per-message statements (`HotPath`) on the SQLAlchemy engine: PostgreSQL's, and SQLite's
when the fast path (`store_sqlite.SqliteFastPath`, the same calls) is unavailable. `Store` works
through `HotPath` alone; `StoreEngine._hot` picks the implementation the store opened with."""

from __future__ import annotations

from typing import Any, Protocol, cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_gateway.store import fence as fencing
from hermes_gateway.store.fence import Fence
from hermes_gateway.store.models import InboxRow, MessageRow, SessionRow

Row = dict[str, Any]
_INBOX = cast(Table, InboxRow.__table__)
_MSG = cast(Table, MessageRow.__table__)
_SESSIONS = cast(Table, SessionRow.__table__)
# Statements built once with bound parameters: SQLAlchemy caches their compiled form, while a
# statement with values baked in is keyed and compiled again on every call.
_ACCEPT = insert(_INBOX)
_ADD_MESSAGES = insert(_MSG)
_IDS: Any = bindparam("ids", expanding=True)
_BY_IDS = _INBOX.c.id.in_(_IDS)
_MARK = update(_INBOX).where(_BY_IDS).values(status=bindparam("s"), updated_at=bindparam("now"))
_MARK_REPLY = _MARK.values(reply=bindparam("new_reply"))
_SETTLE = _MARK_REPLY.values(run_id=bindparam("new_run_id"))
_PROGRESS = (
    update(_INBOX).where(_BY_IDS).values(parts_sent=bindparam("parts"), updated_at=bindparam("now"))
)
_INTENT = (
    update(_INBOX)
    .where(_BY_IDS)
    .values(
        parts_sent=bindparam("parts"),
        sending=bindparam("idx"),
        sending_after=bindparam("after"),
        updated_at=bindparam("now"),
    )
)
_FLY = (
    update(_INBOX).where(_BY_IDS, _INBOX.c.status == "accepted").values(in_flight=bindparam("mark"))
)
_PREVIEW = (
    update(_INBOX)
    .where(_INBOX.c.platform == bindparam("p"), _INBOX.c.chat_id == bindparam("c"))
    .where(_INBOX.c.message_id == bindparam("m"))
    .values(preview=bindparam("ref"))
)
_HISTORY = (
    select(_MSG.c.role, _MSG.c.content, _MSG.c.tool_calls, _MSG.c.tool_call_id)
    .where(_MSG.c.session_id == bindparam("sid"))
    .order_by(_MSG.c.id)
)
_CURRENT_SESSION = (
    select(_SESSIONS.c.id)
    .where(_SESSIONS.c.key == bindparam("key"), _SESSIONS.c.closed_at.is_(None))
    .order_by(_SESSIONS.c.id.desc())
    .limit(1)
)
_NEW_SESSION = insert(_SESSIONS)


class HotPath(Protocol):
    """What one message costs the store: each call runs in the transaction `_hot` opened."""

    async def accept(self, row: Row) -> int | None:
        """The new inbox id; None (fast path) or IntegrityError (engine) for a redelivery."""

    async def mark(
        self, ids: list[int], status: str, reply: str | None, now: float, fence: Fence | None
    ) -> None: ...

    async def progress(
        self, ids: list[int], parts_sent: int, now: float, fence: Fence | None
    ) -> None: ...

    async def intent(
        self, ids: list[int], index: int, after: str, now: float, fence: Fence | None
    ) -> None:
        """Part ``index`` is about to go out (so the ones before it went), after ``after``."""

    async def claim(self, fence: Fence, now: float) -> None:
        """Record a new lease's token for its session; `FencedOut` if a newer one was seen.
        Every call given a ``fence`` checks it in its own transaction the same way."""

    async def fly(self, ids: list[int], mark: int) -> None:
        """`in_flight` on unanswered entries: 1 (2 on probation) when a run starts on them, 0
        when a clean stop takes that back."""

    async def remember_preview(self, key: tuple[str, str, str], ref: str) -> None: ...

    async def session_id(self, key: str, *, create: bool, now: float) -> int | None: ...

    async def complete_turn(
        self,
        session_id: int,
        rows: list[Row],
        ids: list[int],
        settle: tuple[str, str, str, float],
        fence: Fence | None,
    ) -> None:
        """Append message rows and settle inbox entries: (status, reply, run_id, now)."""

    async def history(self, session_id: int) -> list[tuple[Any, ...]]: ...


class EngineHotPath:
    """`HotPath` on one connection of the engine, in its transaction."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    async def accept(self, row: Row) -> int | None:
        result = await self.conn.execute(_ACCEPT, row)
        return int(result.inserted_primary_key[0])  # type: ignore[index]

    async def mark(
        self, ids: list[int], status: str, reply: str | None, now: float, fence: Fence | None
    ) -> None:
        if fence is not None:
            await fencing.check(self.conn, fence, now)
        params = {"ids": ids, "s": status, "now": now}
        if reply is None:
            await self.conn.execute(_MARK, params)
        else:
            await self.conn.execute(_MARK_REPLY, {**params, "new_reply": reply})

    async def progress(
        self, ids: list[int], parts_sent: int, now: float, fence: Fence | None
    ) -> None:
        if fence is not None:
            await fencing.check(self.conn, fence, now)
        await self.conn.execute(_PROGRESS, {"ids": ids, "parts": parts_sent, "now": now})

    async def intent(
        self, ids: list[int], index: int, after: str, now: float, fence: Fence | None
    ) -> None:
        if fence is not None:
            await fencing.check(self.conn, fence, now)
        params = {"ids": ids, "parts": index, "idx": index, "after": after[:128], "now": now}
        await self.conn.execute(_INTENT, params)

    async def fly(self, ids: list[int], mark: int) -> None:
        await self.conn.execute(_FLY, {"ids": ids, "mark": mark})

    async def remember_preview(self, key: tuple[str, str, str], ref: str) -> None:
        await self.conn.execute(_PREVIEW, {"p": key[0], "c": key[1], "m": key[2], "ref": ref})

    async def session_id(self, key: str, *, create: bool, now: float) -> int | None:
        sid = (await self.conn.execute(_CURRENT_SESSION, {"key": key})).scalar()
        if sid is None and create:
            result = await self.conn.execute(_NEW_SESSION, {"key": key, "created_at": now})
            sid = result.inserted_primary_key[0]  # type: ignore[index]
        return None if sid is None else int(sid)

    async def claim(self, fence: Fence, now: float) -> None:
        await fencing.check(self.conn, fence, now)

    async def complete_turn(
        self,
        session_id: int,
        rows: list[Row],
        ids: list[int],
        settle: tuple[str, str, str, float],
        fence: Fence | None,
    ) -> None:
        if fence is not None:
            await fencing.check(self.conn, fence, settle[3])
        if rows:
            await self.conn.execute(_ADD_MESSAGES, rows)
        if ids:
            status, reply, run_id, now = settle
            params = {"ids": ids, "s": status, "now": now, "new_reply": reply, "new_run_id": run_id}
            await self.conn.execute(_SETTLE, params)

    async def history(self, session_id: int) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in await self.conn.execute(_HISTORY, {"sid": session_id})]
