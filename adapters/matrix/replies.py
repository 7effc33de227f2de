"""Matrix delivery: each part a message event sent with a transaction id derived from the
part's idempotency key, so a second send of a part (a retry, or a replay after a crash left it
in doubt) is answered by the homeserver with the event the first made, never a second message;
the live preview by ``m.replace`` edits; files uploaded to the media repository."""

from __future__ import annotations

import mimetypes
import uuid
from typing import Any, cast
from urllib.parse import quote

import structlog
from mautrix.client import ClientAPI
from mautrix.types import EventID, EventType, RoomID

from adapters.matrix.api import Method, call, raw
from adapters.matrix.render import LIMIT, content, first_part, render
from hermes_gateway.platforms import (
    AdapterError,
    LivePreview,
    MessageEvent,
    OutboundMessage,
    PreviewBook,
    PreviewRef,
    PreviewWire,
    Recent,
    Remember,
    Replier,
    Upload,
    with_retry,
)

log = structlog.get_logger("hermes.adapters.matrix")
Key = tuple[str, str]  # what a preview answers: (room id, event id)
_MSGTYPES = {"image": "m.image", "audio": "m.audio", "voice": "m.audio"}


def txn_id(key: str | None) -> str:
    """The transaction id of a part: its key when it has one (the same on every attempt), a
    fresh one for a message that answers nothing (nothing could tell two sends apart)."""
    return f"hermes-{key}" if key else f"hermes-{uuid.uuid4().hex}"


class Wire:
    """Sends, edits and uploads through one client, each retried (a rate limit waits the
    homeserver's ``retry_after_ms``); notes the bot's own events and the threads it answers in,
    which tell a reply to the bot and a thread it takes part in."""

    def __init__(self, api: ClientAPI, timeout: float) -> None:
        self.api = api
        self.timeout = timeout
        self.own = Recent()  # the bot's event ids
        self.threads = Recent()  # "<room> <thread root>" the bot answered in

    async def send(self, room_id: str, body: dict[str, Any], txn: str, *, attempts: int = 5) -> str:
        async def attempt() -> str:
            return await call(
                lambda: self.api.send_message_event(
                    RoomID(room_id), EventType.ROOM_MESSAGE, cast(Any, body), txn_id=txn
                ),
                self.timeout,
            )

        event_id = str(await with_retry(attempt, what="matrix.send", attempts=attempts))
        self.own.add(event_id)
        return event_id

    async def edit(self, room_id: str, event_id: str, html: str, *, attempts: int = 5) -> None:
        new = content(html)
        body = {
            **new,
            "body": f"* {new['body']}",
            "formatted_body": f"* {html}",
            "m.new_content": new,
            "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
        }
        await self.send(room_id, body, txn_id(None), attempts=attempts)

    async def typing(self, room_id: str, user_id: str, ms: int) -> None:
        """One typing notification of ``user_id`` (the bot) lasting ``ms``, or withdrawn (0);
        a single attempt: the next comes soon."""
        path = (
            f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/typing/{quote(user_id, safe='')}"
        )
        body = {"typing": True, "timeout": ms} if ms > 0 else {"typing": False}
        await raw(self.api, Method.PUT, path, body=body, timeout=self.timeout)

    async def upload(self, upload: Upload) -> str:
        file = upload.file

        async def attempt() -> str:
            mxc = await call(
                lambda: self.api.upload_media(upload.data, _mime(file.name), file.name),
                self.timeout * 3,
            )
            return str(mxc)

        return await with_retry(attempt, what="matrix.upload", attempts=3)


def _mime(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def relation(message: OutboundMessage, index: int, reply_to: str | None) -> dict[str, Any]:
    """Where a part goes: in its thread (the first part quoting the message answered, the
    others falling back to it), else the first part as a reply to the message."""
    if message.thread_id:
        rel: dict[str, Any] = {"rel_type": "m.thread", "event_id": message.thread_id}
        if reply_to:
            rel["is_falling_back"] = index > 0
            rel["m.in_reply_to"] = {"event_id": reply_to}
        return {"m.relates_to": rel}
    if index == 0 and reply_to:
        return {"m.relates_to": {"m.in_reply_to": {"event_id": reply_to}}}
    return {}


class RoomReply:
    """One reply's primitives in its room (a `ReplyWire`): every part is sent with its key as
    its transaction id, which the homeserver does not double, so there is nothing to look up."""

    def __init__(self, wire: Wire, message: OutboundMessage) -> None:
        self.wire = wire
        self.message = message

    def after(self) -> str:
        return ""  # the transaction id settles a part in doubt: no reference to look after

    async def post(self, index: int, part: str, key: str | None) -> None:
        message = self.message
        body = content(part) | relation(message, index, message.reply_to)
        await self.wire.send(message.chat_id, body, txn_id(key))
        if message.thread_id:
            self.wire.threads.add(f"{message.chat_id} {message.thread_id}")

    async def edit(self, ref: str, part: str) -> None:
        await self.wire.edit(self.message.chat_id, ref, part)

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        return False  # sent again with the same transaction id, which Synapse does not double

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        file, message = upload.file, self.message
        mxc = await self.wire.upload(upload)
        body: dict[str, Any] = {
            "msgtype": _MSGTYPES.get(file.kind, "m.file"),
            "body": file.caption or file.name,
            "filename": file.name,
            "url": mxc,
            "info": {"mimetype": _mime(file.name), "size": len(upload.data)},
        }
        body |= relation(message, index, message.reply_to)
        await self.wire.send(message.chat_id, body, txn_id(key))

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        # the upload is made again (an unreferenced copy in the media store at worst); the
        # event naming it carries the part's transaction id, so it is not shown twice
        return False


class Outbox:
    """Replies through one client: live previews registered by `preview`, settled by `send`."""

    def __init__(self, wire: Wire, edit_interval: float, remember: Remember | None) -> None:
        self.wire = wire
        self.edit_interval = edit_interval
        self.previews: PreviewBook[Key, str] = PreviewBook("matrix", remember)
        self.replier = Replier(self.previews)

    def adopt(self, event: MessageEvent, ref: str) -> None:
        if ref.startswith("$"):
            self.previews.adopt((event.chat_id, event.message_id), ref)

    def preview(self, event: MessageEvent) -> LivePreview[str]:
        async def post(html: str) -> str:
            message = OutboundMessage.to(event, "")
            body = content(html) | relation(message, 0, event.message_id)
            return await self.wire.send(event.chat_id, body, txn_id(None), attempts=1)

        async def edit(event_id: str, html: str) -> None:
            await self.wire.edit(event.chat_id, event_id, html, attempts=1)

        wire = PreviewWire("matrix", post, edit, first_part, self.edit_interval)
        return self.previews.open((event.chat_id, event.message_id), event, wire)

    async def send(self, message: OutboundMessage) -> None:
        """Each part once, the first answering ``answers[0]`` (in its thread). A reply takes
        over the live preview of its answer as its first part; a notice leaves a preview as
        it is."""
        preview = await self._take_preview(message)
        wire = RoomReply(self.wire, message)
        await self.replier.send(message, render(message.text), wire, preview)

    async def _take_preview(self, message: OutboundMessage) -> PreviewRef[Key, str] | None:
        found: PreviewRef[Key, str] | None = None
        for answered in message.answers:
            event_id = await self.previews.take((message.chat_id, answered))
            if event_id is None or message.kind != "reply":
                continue
            if found is None:
                found = PreviewRef((message.chat_id, message.answers[0]), event_id)
            else:
                await self._redact(message.chat_id, event_id)
        return found

    async def _redact(self, room_id: str, event_id: str) -> None:
        try:
            await call(
                lambda: self.wire.api.redact(RoomID(room_id), EventID(event_id)), self.wire.timeout
            )
        except AdapterError as exc:  # the preview stays, showing the text so far
            log.debug("matrix.redact_failed", room_id=room_id, error=str(exc))

    async def close(self) -> None:
        await self.previews.finish_all()


__all__ = ["LIMIT", "Outbox", "RoomReply", "Wire", "txn_id"]
