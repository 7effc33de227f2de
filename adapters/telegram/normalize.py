"""Telegram `Update` -> `MessageEvent`: chat kinds, forum topics, captions, attachments, and
whether the bot was addressed (@username, a reply to it, `/cmd@botname`), mention stripped."""

from __future__ import annotations

from functools import partial
from typing import Any

import structlog

from hermes_gateway.platforms import (
    Attachment,
    BotIdentity,
    ChatType,
    Inbound,
    MessageEvent,
    tolerant,
)
from telegram import Message, MessageEntity, Update

log = structlog.get_logger("hermes.adapters.telegram")

CHAT_TYPES: dict[str, ChatType] = {
    "private": "dm",
    "group": "group",
    "supergroup": "group",
    "channel": "channel",
}


def update_kind(update: Update) -> str:
    """The update's payload field (``message``, ``edited_message``, ...), for log lines."""
    try:
        keys = [k for k in update.to_dict() if k != "update_id"]
    except Exception:  # a half-parsed update: still just a log line
        keys = []
    return keys[0] if keys else "empty"


def normalize(update: Update, me: BotIdentity, *, per_user: bool = True) -> Inbound | None:
    """The message in ``update`` as an `Inbound`, or None (logged at debug) when it is not a
    new message from a person with some content: edits, channel posts, callback queries,
    stickers, service messages and unknown kinds are ignored.

    Never raises: PTB does not check field types, so a shape Telegram does not send (a list
    for a text, a message without a chat) is logged and ignored too (fuzzing)."""
    read = partial(_normalize, update, me, per_user)
    return tolerant(
        read, log, "telegram.update_malformed", update_id=getattr(update, "update_id", None)
    )


def _normalize(update: Update, me: BotIdentity, per_user: bool) -> Inbound | None:
    msg = update.message
    if msg is None:
        log.debug(
            "telegram.update_ignored",
            kind=update_kind(update),
            update_id=getattr(update, "update_id", None),
        )
        return None
    user = msg.from_user
    chat_type = CHAT_TYPES.get(msg.chat.type)
    if user is None or chat_type is None:
        log.debug("telegram.update_ignored", kind="message", reason="no sender or unknown chat")
        return None
    if msg.sticker is not None:
        log.debug("telegram.update_ignored", kind="sticker", chat_id=msg.chat.id)
        return None
    text = msg.text if msg.text is not None else (msg.caption or "")
    entities = msg.entities if msg.text is not None else msg.caption_entities
    mentioned, other_bot, cuts = _addressing(text, entities, me)
    if other_bot:
        log.debug("telegram.update_ignored", reason="command for another bot", chat_id=msg.chat.id)
        return None
    mentioned = mentioned or _replies_to_bot(msg, me)
    attachments = _attachments(msg)
    text = _with_notes(_cut(text, cuts), attachments)
    if not text.strip():
        log.debug("telegram.update_ignored", reason="no content", chat_id=msg.chat.id)
        return None
    topic = msg.message_thread_id if msg.is_topic_message else None
    event = MessageEvent.create(
        platform="telegram",
        chat_type=chat_type,
        chat_id=str(msg.chat.id),
        user_id=str(user.id),
        message_id=str(msg.message_id),
        text=text,
        thread_id=str(topic) if topic else None,
        per_user=per_user,
        user_name=user.username or user.full_name,
        attachments=attachments,
        reply_to=_reply_to(msg),
        mentioned=mentioned,
    )
    return Inbound(event, from_self=me.is_me(user.id), from_bot=bool(user.is_bot))


def _addressing(
    text: str, entities: tuple[MessageEntity, ...], me: BotIdentity
) -> tuple[bool, bool, list[tuple[int, int]]]:
    """(mentioned, a command for another bot, UTF-16 ranges of our @mentions to cut)."""
    mentioned, other_bot = False, False
    cuts: list[tuple[int, int]] = []
    units = text.encode("utf-16-le")
    for entity in entities:
        start, end = entity.offset, entity.offset + entity.length
        piece = units[start * 2 : end * 2].decode("utf-16-le", "replace")
        named = entity.type == MessageEntity.MENTION and piece[1:].lower() == me.username.lower()
        linked = entity.type == MessageEntity.TEXT_MENTION and entity.user is not None
        if named or (linked and entity.user is not None and me.is_me(entity.user.id)):
            mentioned = True
            cuts.append((start, end))
        elif entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            _, at, target = piece.partition("@")
            if at and target.lower() != me.username.lower():
                other_bot = True
            else:
                mentioned = True  # `/cmd@us`, or a bare `/cmd` (Telegram routes it to us)
    return mentioned, other_bot, cuts


def _cut(text: str, cuts: list[tuple[int, int]]) -> str:
    """``text`` without the UTF-16 ranges in ``cuts``, the seams tidied."""
    if not cuts:
        return text
    units = text.encode("utf-16-le")
    pieces, pos = [], 0
    for start, end in sorted(cuts):
        pieces.append(units[pos * 2 : start * 2].decode("utf-16-le", "replace"))
        pos = max(pos, end)
    pieces.append(units[pos * 2 :].decode("utf-16-le", "replace"))
    joined = pieces[0].rstrip(" ")
    for piece in pieces[1:]:
        piece = piece.lstrip(" ")
        if not joined.strip():
            piece = piece.lstrip(",:; ")  # "@bot, do this" -> "do this"
        elif piece and not joined.endswith("\n") and piece[0] not in ",.!?;:\n":
            joined += " "
        joined += piece
    return joined.strip()


def _replies_to_bot(msg: Message, me: BotIdentity) -> bool:
    reply = msg.reply_to_message
    if reply is None or _reply_to(msg) is None:
        return False
    return reply.from_user is not None and me.is_me(reply.from_user.id)


def _reply_to(msg: Message) -> str | None:
    reply = msg.reply_to_message
    if reply is None:
        return None
    if msg.is_topic_message and reply.message_id == msg.message_thread_id:
        return None  # Telegram makes every topic message "reply" to the topic's first message
    return str(reply.message_id)


def _attachments(msg: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if msg.photo:
        p = msg.photo[-1]  # the largest size
        found.append(Attachment("image", p.file_id, "photo.jpg", "image/jpeg", p.file_size or 0))
    # Telegram also sets `document` on an animation: report it once
    document = msg.document if msg.animation is None else None
    media: list[tuple[str, Any, str]] = [
        ("video", msg.animation, "animation.mp4"),
        ("document", document, "document"),
        ("voice", msg.voice, "voice.ogg"),
        ("audio", msg.audio, "audio"),
        ("video", msg.video, "video.mp4"),
        ("video", msg.video_note, "video_note.mp4"),
    ]
    for kind, obj, default in media:
        if obj is None:
            continue
        name = getattr(obj, "file_name", None) or getattr(obj, "title", None) or default
        mime = getattr(obj, "mime_type", None) or ""
        seconds = _seconds(getattr(obj, "duration", None))
        found.append(
            Attachment(kind, obj.file_id, name, mime, obj.file_size or 0, duration=seconds)
        )
    return tuple(found)


def _seconds(duration: Any) -> float:
    """A media duration in seconds: PTB gives an int, or a timedelta in its newer mode."""
    if hasattr(duration, "total_seconds"):
        return float(duration.total_seconds())
    return float(duration) if isinstance(duration, int | float) else 0.0


def _with_notes(text: str, attachments: tuple[Attachment, ...]) -> str:
    """A line per attachment, so the model knows it is there (and a message is never empty)."""
    if not attachments:
        return text
    notes = "\n".join(f"[attached {a.kind}: {a.name}{_size(a.size)}]" for a in attachments)
    return f"{text}\n\n{notes}" if text.strip() else notes


def _size(size: int) -> str:
    if not size:
        return ""
    if size < 1024:
        return f", {size} bytes"
    if size < 1024 * 1024:
        return f", {size / 1024:.0f} KB"
    return f", {size / (1024 * 1024):.1f} MB"
