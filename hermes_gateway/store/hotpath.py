"""What one message costs the store (`HotPath`): its statements and transactions, written once
and run through an `executor.Executor`, on the engine (PostgreSQL; SQLite without the owned
writer) or on the owned SQLite writer (`sqlite.SqliteFastPath`); `StoreEngine._hot` picks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol, TypeVar, cast

from sqlalchemy import Table, bindparam, insert, select, update

from hermes_gateway.store import fence as fencing
from hermes_gateway.store.executor import Executor
from hermes_gateway.store.fence import Fence
from hermes_gateway.store.models import InboxRow, MessageRow, SessionRow

Row = dict[str, Any]
T = TypeVar("T")
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
_SETTLE = _MARK_REPLY.values(run_id=bindparam("new_run_id"), reply_files=bindparam("new_files"))
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


def warm_up() -> list[tuple[Any, Row]]:
    """Each per-message statement with parameters shaped as one message's (one inbox id, rows
    keyed in the order `Store` builds them): the owned SQLite writer compiles these as it
    opens, so the first message does not wait for ten compilations (a different shape only
    costs one more, later)."""
    inbox = dict.fromkeys(
        [
            "platform",
            "chat_id",
            "message_id",
            "session_key",
            "payload",
            "status",
            "accepted_at",
            "updated_at",
            "run_id",
            "trace",
        ]
    )
    message = dict.fromkeys(
        [
            "session_id",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "run_id",
            "created_at",
            "user_id",
        ]
    )
    settle = {"ids": [0], "s": "", "now": 0.0, "new_reply": "", "new_run_id": "", "new_files": None}
    return [
        (_ACCEPT, inbox),
        (_ADD_MESSAGES, message),
        (_MARK, {"ids": [0], "s": "", "now": 0.0}),
        (_MARK_REPLY, {"ids": [0], "s": "", "now": 0.0, "new_reply": ""}),
        (_SETTLE, settle),
        (_PROGRESS, {"ids": [0], "parts": 0, "now": 0.0}),
        (_INTENT, {"ids": [0], "parts": 0, "idx": 0, "after": "", "now": 0.0}),
        (_FLY, {"ids": [0], "mark": 0}),
        (_PREVIEW, {"p": "", "c": "", "m": "", "ref": ""}),
        (_HISTORY, {"sid": 0}),
        (_CURRENT_SESSION, {"key": ""}),
        (_NEW_SESSION, {"key": "", "created_at": 0.0}),
        *fencing.warm_up(),
    ]


class Transact(Protocol):
    """Runs ``body`` in one transaction (``write=False``: one that only reads)."""

    def __call__(self, body: Callable[[Executor], T], *, write: bool = True) -> Awaitable[T]: ...


class HotPath:
    """What one message costs the store. Each call is one transaction body run by
    ``transact``: on the owned SQLite writer each is its own transaction, or a savepoint in a
    group commit under load (`group.GroupCommit`); on the engine they share the transaction
    `StoreEngine._hot` opened."""

    __slots__ = ("_run",)

    def __init__(self, transact: Transact) -> None:
        self._run = transact

    async def accept(self, row: Row) -> int:
        """The new inbox id; an IntegrityError (SQLAlchemy's or sqlite3's) for a redelivery."""
        return await self._run(partial(_insert, _ACCEPT, row))

    async def mark(
        self, ids: list[int], status: str, reply: str | None, now: float, fence: Fence | None
    ) -> None:
        params = {"ids": ids, "s": status, "now": now}
        if reply is None:
            await self._run(partial(_update, fence, now, _MARK, params))
        else:
            params["new_reply"] = reply
            await self._run(partial(_update, fence, now, _MARK_REPLY, params))

    async def progress(
        self, ids: list[int], parts_sent: int, now: float, fence: Fence | None
    ) -> None:
        params = {"ids": ids, "parts": parts_sent, "now": now}
        await self._run(partial(_update, fence, now, _PROGRESS, params))

    async def intent(
        self, ids: list[int], index: int, after: str, now: float, fence: Fence | None
    ) -> None:
        """Part ``index`` is about to go out (so the ones before it went), after ``after``."""
        params = {"ids": ids, "parts": index, "idx": index, "after": after[:128], "now": now}
        await self._run(partial(_update, fence, now, _INTENT, params))

    async def claim(self, fence: Fence, now: float) -> None:
        """Record a new lease's token for its session; `FencedOut` if a newer one was seen.
        Every call given a ``fence`` checks it in its own transaction the same way."""
        await self._run(partial(fencing.check, fence=fence, now=now))

    async def fly(self, ids: list[int], mark: int) -> None:
        """`in_flight` on unanswered entries: 1 (2 on probation) when a run starts on them, 0
        when a clean stop takes that back."""
        await self._run(partial(_update, None, 0.0, _FLY, {"ids": ids, "mark": mark}))

    async def remember_preview(self, key: tuple[str, str, str], ref: str) -> None:
        params = {"p": key[0], "c": key[1], "m": key[2], "ref": ref}
        await self._run(partial(_update, None, 0.0, _PREVIEW, params))

    async def session_id(self, key: str, *, create: bool, now: float) -> int | None:
        return await self._run(partial(_session_id, key, create, now), write=create)

    async def complete_turn(
        self,
        session_id: int,
        rows: list[Row],
        ids: list[int],
        settle: tuple[str, str, str, float, str | None],
        fence: Fence | None,
    ) -> None:
        """Append message rows and settle inbox entries: (status, reply, run_id, now, files)."""
        if rows or ids or fence is not None:
            await self._run(partial(_complete_turn, rows, ids, settle, fence))

    async def history(self, session_id: int) -> list[tuple[Any, ...]]:
        return await self._run(partial(_fetch, _HISTORY, {"sid": session_id}), write=False)


# -- the transaction bodies: each runs on the executor's thread, inside its transaction -----


def _insert(stmt: Any, row: Row, db: Executor) -> int:
    return db.insert(stmt, row)


def _fetch(stmt: Any, params: Row, db: Executor) -> list[tuple[Any, ...]]:
    return db.fetch(stmt, params)


def _update(fence: Fence | None, now: float, stmt: Any, params: Row, db: Executor) -> None:
    if fence is not None:
        fencing.check(db, fence, now)
    db.execute(stmt, params)


def _session_id(key: str, create: bool, now: float, db: Executor) -> int | None:
    found = db.fetch(_CURRENT_SESSION, {"key": key})
    if found:
        return int(found[0][0])
    return db.insert(_NEW_SESSION, {"key": key, "created_at": now}) if create else None


def _complete_turn(
    rows: list[Row],
    ids: list[int],
    settle: tuple[str, str, str, float, str | None],
    fence: Fence | None,
    db: Executor,
) -> None:
    status, reply, run_id, now, files = settle
    if fence is not None:
        fencing.check(db, fence, now)
    if rows:
        db.executemany(_ADD_MESSAGES, rows)
    if ids:
        params = {"ids": ids, "s": status, "now": now, "new_reply": reply, "new_run_id": run_id}
        params["new_files"] = files
        db.execute(_SETTLE, params)
