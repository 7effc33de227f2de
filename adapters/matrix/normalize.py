"""Matrix room events (raw /sync JSON) -> `MessageEvent`: the messages the gateway handles
(text, notices, emotes, files) and the ones it leaves (edits, reactions, state, odd shapes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hermes_gateway.platforms import Attachment, BotIdentity, ChatType, Inbound, MessageEvent

_TEXT = frozenset({"m.text", "m.notice", "m.emote"})
_FILES = {"m.image": "image", "m.audio": "audio", "m.video": "video", "m.file": "document"}


@dataclass(frozen=True, slots=True)
class Where:
    """What the adapter knows of a message's room and thread beyond the event itself."""

    room_id: str
    direct: bool  # the bot and one person: every message is for the bot
    replied_to_me: bool = False  # the message replies to one of the bot's
    my_thread: bool = False  # the bot already answers in the message's thread


def relation(content: Mapping[str, Any]) -> Mapping[str, Any]:
    rel = content.get("m.relates_to")
    return rel if isinstance(rel, Mapping) else {}


def reply_target(content: Mapping[str, Any]) -> str:
    """The event a message replies to ("" if none), the one a thread's fallback names too."""
    reply = relation(content).get("m.in_reply_to")
    target = reply.get("event_id") if isinstance(reply, Mapping) else None
    return target if isinstance(target, str) else ""


def thread_root(content: Mapping[str, Any]) -> str:
    rel = relation(content)
    root = rel.get("event_id")
    return root if rel.get("rel_type") == "m.thread" and isinstance(root, str) else ""


def normalize(raw: Any, me: BotIdentity, where: Where, *, per_user: bool) -> Inbound | None:
    """The `MessageEvent` for an ``m.room.message``, or None to leave it."""
    if not isinstance(raw, Mapping) or raw.get("type") != "m.room.message":
        return None
    content, sender, event_id = raw.get("content"), raw.get("sender"), raw.get("event_id")
    if not isinstance(content, Mapping) or not isinstance(sender, str):
        return None
    msgtype = content.get("msgtype")
    if not isinstance(msgtype, str) or (msgtype not in _TEXT and msgtype not in _FILES):
        return None
    if not isinstance(event_id, str):
        return None
    if relation(content).get("rel_type") == "m.replace":
        return None  # an edit: the message it changes was answered already
    attachments = _attachments(content, msgtype)
    text = _text(content, msgtype, bool(attachments), me.user_id)
    root = thread_root(content)
    chat_type: ChatType = "dm" if where.direct else ("thread" if root else "group")
    event = MessageEvent.create(
        platform="matrix",
        chat_type=chat_type,
        chat_id=where.room_id,
        user_id=sender,
        message_id=event_id,
        text=_with_file_notes(text, attachments),
        thread_id=root or None,
        per_user=per_user,
        user_name=sender,
        attachments=attachments,
        reply_to=event_id,
        mentioned=where.direct or where.replied_to_me or where.my_thread or mentions(content, me),
    )
    return Inbound(event, from_self=me.is_me(sender), from_bot=msgtype == "m.notice")


def mentions(content: Mapping[str, Any], me: BotIdentity) -> bool:
    """The bot is named: in ``m.mentions``, as a pill link, or by its user id in the text."""
    named = content.get("m.mentions")
    ids = named.get("user_ids") if isinstance(named, Mapping) else None
    if isinstance(ids, list) and me.user_id in ids:
        return True
    body, html = _str(content.get("body")), _str(content.get("formatted_body"))
    pill = f"matrix.to/#/{me.user_id}"
    return me.user_id in body or pill in html or pill.replace("@", "%40") in html


def _text(content: Mapping[str, Any], msgtype: str, has_file: bool, my_id: str) -> str:
    body = _str(content.get("body"))
    if has_file:  # a file's body is its name, unless a caption came with it
        name = _str(content.get("filename"))
        return body if name and body != name else ""
    if reply_target(content) and body.startswith("> "):
        body = _without_fallback(body)
    body = body.replace(my_id, "").strip().lstrip(":,").strip()  # "@bot:hs: hi" -> "hi"
    return f"* {body}" if msgtype == "m.emote" else body


def _without_fallback(body: str) -> str:
    """A reply's body without the quote of the message it answers (the spec's fallback)."""
    lines = body.split("\n")
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).strip()


def _attachments(content: Mapping[str, Any], msgtype: str) -> tuple[Attachment, ...]:
    kind = _FILES.get(msgtype)
    url = _str(content.get("url"))
    if kind is None or not url.startswith("mxc://"):
        return ()  # an encrypted file has no plain url: nothing the bot could read
    info = content.get("info")
    info = info if isinstance(info, Mapping) else {}
    size, mime = info.get("size"), _str(info.get("mimetype"))
    if kind == "audio" and "org.matrix.msc3245.voice" in content:
        kind = "voice"
    duration = info.get("duration")
    return (
        Attachment(
            kind=kind,
            file_id=url,
            name=_str(content.get("filename")) or _str(content.get("body")),
            mime_type=mime,
            size=size if isinstance(size, int) and size >= 0 else 0,
            url=url,
            duration=duration / 1000 if isinstance(duration, int) and duration > 0 else 0.0,
        ),
    )


def _with_file_notes(text: str, attachments: tuple[Attachment, ...]) -> str:
    # the model sees text only: name what came with the message so it is not silently missing
    notes = [
        f"[attached file: {a.name or a.file_id} ({a.mime_type or a.kind})]" for a in attachments
    ]
    return "\n".join([text, *notes]).strip() if notes else text


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
