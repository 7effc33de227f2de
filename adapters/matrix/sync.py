"""The /sync loop: each batch's invites answered and messages handed to the intake, in order,
before its ``next_batch`` token is kept; a batch the store could not take is synced again from
the same token (the inbox drops what it already has). A gappy timeline (``limited``) is filled
from /messages back to the token, so a long stop misses nothing either."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import structlog
from mautrix.client import ClientAPI

from adapters.matrix.api import JSON, Method, raw
from adapters.matrix.normalize import Where, normalize, reply_target, thread_root
from adapters.matrix.replies import Wire
from adapters.matrix.settings import MatrixConfig
from adapters.matrix.state import SyncState
from hermes_gateway.platforms import (
    AdapterError,
    AdapterHost,
    BotIdentity,
    Intake,
    PermanentAdapterError,
    RateLimitedError,
    Recent,
    TransientAdapterError,
    tolerant,
)

log = structlog.get_logger("hermes.adapters.matrix")
TYPES = ["m.room.message", "m.room.encrypted", "m.room.member"]
PAGES = 20  # /messages pages (of 100) fetched to fill one room's gap
ENCRYPTED = (
    "I can't read end-to-end encrypted messages, so I can't answer in this room. "
    "Please talk to me in a room without encryption."
)


def sync_filter(limit: int) -> str:
    """Only what the bot acts on: messages, encrypted events (to say it cannot read them),
    membership (who is in a room, whether it is a DM); no presence, receipts or account data."""
    room = {
        "timeline": {"limit": limit, "types": TYPES},
        "state": {"types": ["m.room.member"], "lazy_load_members": True},
        "ephemeral": {"types": []},
        "account_data": {"types": []},
    }
    return json.dumps({"room": room, "presence": {"types": []}, "account_data": {"types": []}})


class Batch:
    """What one sync batch's rooms mean: invites accepted or declined, messages submitted, an
    encrypted room told once that the bot cannot read it."""

    def __init__(
        self,
        host: AdapterHost,
        me: BotIdentity,
        wire: Wire,
        config: Callable[[], MatrixConfig],
    ) -> None:
        self.host = host
        self.me = me
        self.wire = wire
        self.config = config
        self.intake = Intake(host, "matrix")
        self.members: dict[str, int] = {}  # room -> joined members, while known
        self.others = Recent()  # event ids known not to be the bot's

    async def invited(self, room_id: str, invite: Any) -> None:
        """Join when the inviter is allowed (or, with pairing on, asks for a direct chat, where
        a stranger can ask for a pairing code); decline any other invite."""
        member = _my_invite(invite, self.me.user_id)
        if member is None:
            return
        inviter, direct = member
        section = self.config()
        allowed = section.allow_all or inviter in section.allowed_users
        try:
            if allowed or (section.pairing and direct):
                await raw(
                    self.wire.api, Method.POST, f"/_matrix/client/v3/join/{_q(room_id)}", body={}
                )
                log.info("matrix.invite_accepted", room_id=room_id, inviter=inviter)
            else:
                await self._leave(room_id)
                log.warning("matrix.invite_declined", room_id=room_id, inviter=inviter)
        except PermanentAdapterError as exc:  # the room is gone, or the invite withdrawn
            log.warning("matrix.invite_failed", room_id=room_id, error=str(exc))

    async def _leave(self, room_id: str) -> None:
        await raw(
            self.wire.api, Method.POST, f"/_matrix/client/v3/rooms/{_q(room_id)}/leave", body={}
        )

    async def event(self, room_id: str, event: Any, state: SyncState) -> bool:
        """Handle one timeline event; False when the store could not take it (sync again)."""
        if not isinstance(event, Mapping):
            return True
        kind, sender = event.get("type"), event.get("sender")
        if kind == "m.room.member":
            self.members.pop(room_id, None)
            return True
        if self.me.is_me(sender):
            if isinstance(event.get("event_id"), str):
                self.wire.own.add(event["event_id"])
            return True
        try:
            if kind == "m.room.encrypted":
                await self._cannot_read(room_id, state)
            elif kind == "m.room.message":
                return await self._message(room_id, event)
            return True
        except (TransientAdapterError, RateLimitedError):
            raise  # the batch is synced again once the homeserver answers
        except Exception:  # one bad event must never stop the next
            log.exception("matrix.event_failed", room_id=room_id, event_id=event.get("event_id"))
            return True

    async def _message(self, room_id: str, event: Mapping[str, Any]) -> bool:
        where = await self._where(room_id, event)
        me, ids = self.me, {"room_id": room_id, "event_id": event.get("event_id")}
        taken = await self.intake.take(
            lambda per_user: tolerant(
                lambda: normalize(event, me, where, per_user=per_user),
                log,
                "matrix.event_malformed",
                **ids,
            ),
            durable=True,
        )
        return not taken.keep

    async def _where(self, room_id: str, event: Mapping[str, Any]) -> Where:
        content = event.get("content")
        content = content if isinstance(content, Mapping) else {}
        direct = await self._count(room_id) <= 2
        if direct:
            return Where(room_id, True)
        root, target = thread_root(content), reply_target(content)
        mine = f"{room_id} {root}" in self.wire.threads or await self._mine(room_id, root)
        return Where(room_id, False, await self._mine(room_id, target), mine)

    async def _count(self, room_id: str) -> int:
        known = self.members.get(room_id)
        if known is None:
            path = f"/_matrix/client/v3/rooms/{_q(room_id)}/joined_members"
            try:
                joined = (await raw(self.wire.api, Method.GET, path)).get("joined")
            except PermanentAdapterError:
                joined = None
            known = len(joined) if isinstance(joined, Mapping) else 3
            self.members[room_id] = known
        return known

    async def _mine(self, room_id: str, event_id: str) -> bool:
        """Whether ``event_id`` is one of the bot's (asked of the homeserver once)."""
        if not event_id or event_id in self.others:
            return False
        if event_id in self.wire.own:
            return True
        path = f"/_matrix/client/v3/rooms/{_q(room_id)}/event/{_q(event_id)}"
        try:
            sender = (await raw(self.wire.api, Method.GET, path)).get("sender")
        except PermanentAdapterError:  # not there, or not visible to the bot
            sender = None
        (self.wire.own if self.me.is_me(sender) else self.others).add(event_id)
        return self.me.is_me(sender)

    def summary(self, room_id: str, room: Mapping[str, Any]) -> None:
        """The room's members as its summary counts them, the invited among them (a room of
        the bot and one person with a third invited is not a direct chat)."""
        summary = room.get("summary")
        summary = summary if isinstance(summary, Mapping) else {}
        joined, invited = (
            summary.get("m.joined_member_count"),
            summary.get("m.invited_member_count"),
        )
        if isinstance(joined, int):
            self.members[room_id] = joined + (invited if isinstance(invited, int) else 0)

    async def _cannot_read(self, room_id: str, state: SyncState) -> None:
        """Say once per room that encrypted messages cannot be read: the notice's transaction
        id is the room's, so a crash before it is noted does not make it twice either."""
        if room_id in state.kept.told_encrypted:
            return
        txn = "hermes-e2ee-" + hashlib.sha256(room_id.encode()).hexdigest()[:32]
        try:
            await self.wire.send(room_id, {"msgtype": "m.notice", "body": ENCRYPTED}, txn)
        except PermanentAdapterError as exc:  # the bot may not speak there: noted all the same
            log.warning("matrix.encrypted_notice_failed", room_id=room_id, error=str(exc))
        await state.save(told=room_id)
        log.warning("matrix.encrypted_room", room_id=room_id)


def _my_invite(invite: Any, my_id: str) -> tuple[str, bool] | None:
    """(inviter, is_direct) from an invited room's stripped state."""
    state = invite.get("invite_state") if isinstance(invite, Mapping) else None
    events = state.get("events") if isinstance(state, Mapping) else None
    for event in events if isinstance(events, list) else ():
        if not isinstance(event, Mapping) or event.get("type") != "m.room.member":
            continue
        content = event.get("content")
        if event.get("state_key") != my_id or not isinstance(content, Mapping):
            continue
        if content.get("membership") == "invite" and isinstance(event.get("sender"), str):
            return event["sender"], content.get("is_direct") is True
    return None


def _q(part: str) -> str:
    return quote(part, safe="")


class Syncer:
    """The long poll, from the kept token on; runs until cancelled or the homeserver fails."""

    timeline_limit = 50

    def __init__(self, api: ClientAPI, state: SyncState, batch: Batch, timeout_s: float) -> None:
        self.api = api
        self.state = state
        self.batch = batch
        self.timeout_ms = int(timeout_s * 1000)

    async def run(self, progress: Callable[[], None]) -> None:
        kept = await self.state.load()
        since = kept.since or await self._first()
        while True:
            try:
                answer = await self._sync(since, self.timeout_ms, self.timeline_limit)
            except RateLimitedError as exc:
                log.warning("matrix.sync_rate_limited", retry_after=exc.retry_after)
                await asyncio.sleep(exc.retry_after)
                continue
            except PermanentAdapterError as exc:  # a token this homeserver does not know (its
                # database replaced): retrying cannot help, so start afresh, and say so
                log.error("matrix.since_refused", error=str(exc))
                since = await self._first()
                continue
            progress()
            if await self._take(answer, since):
                since = _next(answer)
                await self.state.save(since=since)
            else:  # the store is down: wait for it, then take the same batch again
                await self.batch.host.writable()

    async def _first(self) -> str:
        """A bot's first start: answer the invites waiting, but none of the history (it was
        not written to this gateway); from here on nothing is missed."""
        answer = await self._sync(None, 0, 1)
        for room_id, invite in _rooms(answer, "invite").items():
            await self.batch.invited(room_id, invite)
        since = _next(answer)
        await self.state.save(since=since)
        log.info("matrix.first_sync")
        return since

    async def _sync(self, since: str | None, timeout_ms: int, limit: int) -> JSON:
        query: dict[str, Any] = {"timeout": timeout_ms, "filter": sync_filter(limit)}
        if since:
            query["since"] = since
        return await raw(self.api, Method.GET, "/_matrix/client/v3/sync", query=query, timeout=None)

    async def _take(self, answer: JSON, since: str) -> bool:
        for room_id, invite in _rooms(answer, "invite").items():
            await self.batch.invited(room_id, invite)
        for room_id, room in _rooms(answer, "join").items():
            if not isinstance(room, Mapping):
                continue
            for event in await self._timeline(room_id, room, since):
                if not await self.batch.event(room_id, event, self.state):
                    return False
            self.batch.summary(room_id, room)
        for room_id in _rooms(answer, "leave"):
            self.batch.members.pop(room_id, None)
        return True

    async def _timeline(self, room_id: str, room: Mapping[str, Any], since: str) -> list[Any]:
        timeline = room.get("timeline")
        timeline = timeline if isinstance(timeline, Mapping) else {}
        events = timeline.get("events")
        events = list(events) if isinstance(events, list) else []
        prev = timeline.get("prev_batch")
        if timeline.get("limited") is True and isinstance(prev, str) and since:
            return await self._gap(room_id, prev, since) + events
        return events

    async def _gap(self, room_id: str, prev: str, since: str) -> list[Any]:
        """The events between the kept token and the timeline's start, oldest first."""
        path = f"/_matrix/client/v3/rooms/{_q(room_id)}/messages"
        found: list[Any] = []
        token = prev
        for _ in range(PAGES):
            query = {"from": token, "to": since, "dir": "b", "limit": 100}
            query["filter"] = json.dumps({"types": TYPES})
            try:
                page = await raw(self.api, Method.GET, path, query=query)
            except PermanentAdapterError as exc:
                log.warning("matrix.gap_unfilled", room_id=room_id, error=str(exc))
                break
            chunk = page.get("chunk")
            found.extend(chunk if isinstance(chunk, list) else [])
            end = page.get("end")
            if not chunk or not isinstance(end, str) or end == token:
                break
            token = end
        log.info("matrix.gap_filled", room_id=room_id, events=len(found))
        return list(reversed(found))


def _rooms(answer: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    rooms = answer.get("rooms")
    section = rooms.get(kind) if isinstance(rooms, Mapping) else None
    return section if isinstance(section, Mapping) else {}


def _next(answer: Mapping[str, Any]) -> str:
    token = answer.get("next_batch")
    if not isinstance(token, str) or not token:
        raise TransientAdapterError("a /sync answer without next_batch")
    return token


__all__ = ["ENCRYPTED", "AdapterError", "Batch", "Syncer"]
