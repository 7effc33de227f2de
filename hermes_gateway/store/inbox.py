"""The inbox's crash-loop guard: the mark a run commits before it works on its messages, the
verdict at start on what the last crash left in flight (suspects, and crashes counted against a
message on probation), the quarantine of what was shown to take the process down, the operator's
retry and drop, and entries listed by status. Also how a row's payload becomes a `MessageEvent`
again. The rule is in docs/quarantine.md.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import structlog
from sqlalchemy import ColumnElement, Table, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hermes_gateway.errors import StoreError
from hermes_gateway.events import Attachment, MessageEvent
from hermes_gateway.store.engine import StoreEngine
from hermes_gateway.store.models import InboxRow

log = structlog.get_logger("hermes.store")
_INBOX = cast(Table, InboxRow.__table__)
_LISTED = (_INBOX.c.id, _INBOX.c.payload, _INBOX.c.attempts, _INBOX.c.accepted_at)
_SHOWN = (
    _INBOX.c.id,
    _INBOX.c.status,
    _INBOX.c.payload,
    _INBOX.c.reply,
    _INBOX.c.attempts,
    _INBOX.c.accepted_at,
    _INBOX.c.updated_at,
)
PREVIEW_CHARS = 200
IN_FLIGHT = 1  # `in_flight`: a run works on the entry
ON_PROBATION = 2  # ... and it is the one suspect in flight in the gateway


@dataclass(frozen=True, slots=True)
class Quarantined:
    """An inbox entry held back from replay: it was shown to take the process down."""

    inbox_id: int
    event: MessageEvent
    attempts: int
    accepted_at: float

    def summary(self) -> dict[str, Any]:
        """For `/status` and `hermes inbox list`: who and when, and the text's first words."""
        text = self.event.text
        return {
            "id": self.inbox_id,
            "platform": self.event.platform,
            "session_key": self.event.session_key,
            "attempts": self.attempts,
            "accepted_at": self.accepted_at,
            "text": text if len(text) <= 60 else text[:59] + "…",
        }


class InboxGuard(StoreEngine):
    """The store's attempt counting and quarantine (`Store` inherits it)."""

    async def begin_attempt(self, inbox_ids: list[int], *, probation: bool = False) -> None:
        """Mark these entries in flight (``probation``: as the one suspect in flight), committed
        before the run does anything, so the next start knows what a crash cut short."""
        if inbox_ids:
            await self._fly(inbox_ids, ON_PROBATION if probation else IN_FLIGHT)

    async def undo_attempt(self, inbox_ids: list[int]) -> None:
        """A clean shutdown interrupted the run: it was no crash, so it was not in flight at one."""
        if inbox_ids:
            await self._fly(inbox_ids, 0)

    async def _fly(self, ids: list[int], mark: int) -> None:
        """Never raises: a store that cannot write costs the mark, not the run."""
        try:
            await self._hot(lambda db: db.fly(ids, mark))
        except StoreError as exc:
            log.error("inbox.attempt_failed", error=str(exc), inbox_ids=ids)

    async def quarantine(
        self, after: int, max_age_s: float, session_key: str | None = None
    ) -> list[Quarantined]:
        """At start, before the replay (of one session: a cluster takeover): judge what the
        last crash left in flight, then hold back every unanswered entry shown ``after`` times
        to take the process down. Entries too old to replay are left to expire."""
        scope = _unanswered(max_age_s, session_key)

        async def run(conn: AsyncConnection) -> list[Quarantined]:
            await _judge(conn, scope)
            held = (*scope, _INBOX.c.attempts >= after)
            rows = await conn.execute(select(*_LISTED).where(*held).order_by(_INBOX.c.id))
            found = [_entry(*row) for row in rows]
            if found:
                ids = [q.inbox_id for q in found]
                await conn.execute(
                    update(_INBOX)
                    .where(_INBOX.c.id.in_(ids))
                    .values(status="quarantined", updated_at=time.time())
                )
            return found

        return await self._tx(run)

    async def suspects(self, max_age_s: float, session_key: str | None = None) -> dict[int, int]:
        """The unanswered entries that run on probation: inbox id -> crashes counted so far."""
        stmt = select(_INBOX.c.id, _INBOX.c.attempts).where(
            *_unanswered(max_age_s, session_key), _INBOX.c.suspect > 0
        )

        async def run(conn: AsyncConnection) -> dict[int, int]:
            return {int(i): int(n) for i, n in await conn.execute(stmt)}

        return await self._query(run)

    async def quarantined(self, limit: int = 100) -> list[Quarantined]:
        """The entries held back now, oldest first."""
        stmt = (
            select(*_LISTED)
            .where(_INBOX.c.status == "quarantined")
            .order_by(_INBOX.c.id)
            .limit(limit)
        )

        async def run(conn: AsyncConnection) -> list[Quarantined]:
            return [_entry(*row) for row in await conn.execute(stmt)]

        return await self._query(run)

    async def release(self, inbox_id: int) -> MessageEvent | None:
        """The operator's retry: the entry is unanswered again with no attempts (and accepted
        now, so a start long after still replays it). None if it is not quarantined."""

        held = (_INBOX.c.id == inbox_id, _INBOX.c.status == "quarantined")

        async def run(conn: AsyncConnection) -> MessageEvent | None:
            # no RETURNING: SQLite has it only since 3.35
            payload = (await conn.execute(select(_INBOX.c.payload).where(*held))).scalar()
            if payload is None:
                return None
            now = time.time()
            await conn.execute(
                update(_INBOX)
                .where(*held)
                .values(
                    status="accepted",
                    attempts=0,
                    in_flight=0,
                    suspect=0,
                    accepted_at=now,
                    updated_at=now,
                )
            )
            return event_from_json(payload)

        return await self._tx(run)

    async def discard(self, inbox_id: int) -> bool:
        """The operator's drop: the entry is settled unanswered; False if not quarantined."""
        stmt = (
            update(_INBOX)
            .where(_INBOX.c.id == inbox_id, _INBOX.c.status == "quarantined")
            .values(status="dropped", updated_at=time.time())
        )

        async def run(conn: AsyncConnection) -> bool:
            return bool((await conn.execute(stmt)).rowcount)

        return await self._tx(run)

    async def entries(
        self, statuses: tuple[str, ...], *, limit: int, older_than_s: float = 0.0
    ) -> list[dict[str, Any]]:
        """Inbox entries in ``statuses`` (accepted at least ``older_than_s`` ago), most
        recently changed first, at most ``limit``: who, when, the message's and the reply's
        first words. For the dashboard's Inbox page."""
        stmt = (
            select(*_SHOWN)
            .where(
                _INBOX.c.status.in_(statuses),
                _INBOX.c.accepted_at <= time.time() - older_than_s,
            )
            .order_by(_INBOX.c.updated_at.desc(), _INBOX.c.id.desc())
            .limit(limit)
        )

        async def run(conn: AsyncConnection) -> list[dict[str, Any]]:
            return [_shown(*row) for row in await conn.execute(stmt)]

        return await self._query(run)


def _unanswered(max_age_s: float, session_key: str | None) -> list[ColumnElement[bool]]:
    """Entries a start replays: unanswered, young enough (of one session: a takeover)."""
    scope = [_INBOX.c.status == "accepted", _INBOX.c.accepted_at >= time.time() - max_age_s]
    if session_key is not None:
        scope.append(_INBOX.c.session_key == session_key)
    return scope


async def _judge(conn: AsyncConnection, scope: list[ColumnElement[bool]]) -> None:
    """What a crash left in flight: an entry on probation (the one suspect in flight) was
    shown to take the process down, so the crash counts against it; every entry in flight
    becomes a suspect, to be run apart from the others. Nothing else was in flight: a
    message that waited is not suspected of anything. A crash with no suspect in flight shows
    that something else takes the process down: what was counted against the suspects that
    waited may have been that too, so it is forgiven."""
    flying = (*scope, _INBOX.c.in_flight > 0)
    found = await conn.execute(select(_INBOX.c.id, _INBOX.c.in_flight).where(*flying))
    marks = {int(i): int(m) for i, m in found}
    if not marks:  # a clean stop, or a crash while idle: nothing to judge
        return
    shown = sorted(i for i, m in marks.items() if m == ON_PROBATION)
    if shown:
        await conn.execute(
            update(_INBOX).where(_INBOX.c.id.in_(shown)).values(attempts=_INBOX.c.attempts + 1)
        )
        log.warning("inbox.crash_counted", inbox_ids=shown)
    else:
        counted = (*scope, _INBOX.c.in_flight == 0, _INBOX.c.suspect > 0, _INBOX.c.attempts > 0)
        forgiven = await conn.execute(update(_INBOX).where(*counted).values(attempts=0))
        if forgiven.rowcount:
            log.info("inbox.crash_forgiven", entries=forgiven.rowcount)
    await conn.execute(update(_INBOX).where(*flying).values(in_flight=0, suspect=1))
    log.info("inbox.suspects", inbox_ids=sorted(marks))


def _shown(
    inbox_id: int,
    status: str,
    payload: str,
    reply: str | None,
    attempts: int,
    accepted_at: float,
    updated_at: float,
) -> dict[str, Any]:
    event = event_from_json(payload)
    return {
        "id": int(inbox_id),
        "status": status,
        "platform": event.platform,
        "session_key": event.session_key,
        "user_name": event.user_name,
        "attempts": int(attempts),
        "accepted_at": float(accepted_at),
        "updated_at": float(updated_at),
        "text": _cut(event.text),
        "reply": _cut(reply or ""),
    }


def _cut(text: str, most: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _entry(inbox_id: int, payload: str, attempts: int, accepted_at: float) -> Quarantined:
    return Quarantined(int(inbox_id), event_from_json(payload), int(attempts), float(accepted_at))


def event_from_json(payload: str, trace: str | None = None) -> MessageEvent:
    """An inbox entry's message, from its payload and its ``trace`` column."""
    data = json.loads(payload)
    data["attachments"] = tuple(Attachment(**a) for a in data.get("attachments") or ())
    data["trace"] = trace or data.get("trace") or ""
    return MessageEvent(**data)
