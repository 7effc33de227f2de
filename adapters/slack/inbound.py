"""Slack event payloads -> `MessageEvent`: the messages the gateway handles (DMs, mentions,
threads, files) and the ones it ignores (edits, joins, other subtypes); odd shapes yield None."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hermes_gateway.platforms import Attachment, BotIdentity, ChatType, Inbound, MessageEvent

# plain messages, messages with files, thread replies also sent to the channel; every other
# subtype (message_changed, message_deleted, channel_join, bot_message, ...) is ignored
HANDLED_SUBTYPES = frozenset({"", "file_share", "thread_broadcast"})
_DM_CHANNEL_TYPES = frozenset({"im"})
_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


def normalize(raw: Any, me: BotIdentity, *, per_user: bool = True) -> Inbound | None:
    """The `MessageEvent` for a ``message`` / ``app_mention`` event, or None to ignore it.

    Channel messages are thread-scoped: a top-level mention starts a thread under it (its
    ``ts`` is the thread id), so the conversation and its session live in that thread. The
    message ``ts`` is the message id, so an ``app_mention`` and its paired ``message`` (and
    Slack's retried deliveries) are one inbox entry.
    """
    if not isinstance(raw, Mapping) or raw.get("type") not in ("message", "app_mention"):
        return None
    if _str(raw.get("subtype")) not in HANDLED_SUBTYPES or raw.get("hidden"):
        return None
    channel, ts, user = _str(raw.get("channel")), _str(raw.get("ts")), _str(raw.get("user"))
    if not channel or not ts or not user:
        return None
    text = _str(raw.get("text"))
    bot_id = _str(raw.get("bot_id"))
    thread_ts = _str(raw.get("thread_ts")) or None
    dm = is_dm(raw)
    chat_type: ChatType = "dm" if dm else "thread"
    attachments = files_of(raw.get("files"))
    event = MessageEvent.create(
        platform="slack",
        chat_type=chat_type,
        chat_id=channel,
        user_id=user,
        message_id=ts,
        text=_with_file_notes(plain_text(text, me.user_id), attachments),
        thread_id=thread_ts if dm else (thread_ts or ts),
        per_user=per_user,
        user_name=_user_name(raw.get("user_profile"), user),
        attachments=attachments,
        reply_to=thread_ts if thread_ts and thread_ts != ts else None,
        mentioned=dm or raw.get("type") == "app_mention" or mentions(text, me.user_id),
    )
    from_self = me.is_me(user) or (bool(bot_id) and bot_id == me.bot_id)
    return Inbound(event, from_self=from_self, from_bot=bool(bot_id))


def is_dm(raw: Mapping[str, Any]) -> bool:
    """A direct message: ``channel_type: im``, or a ``D`` channel id (``app_mention`` events
    carry no channel_type)."""
    channel_type = _str(raw.get("channel_type"))
    if channel_type:
        return channel_type in _DM_CHANNEL_TYPES
    return _str(raw.get("channel")).startswith("D")


def mentions(text: str, bot_user_id: str) -> bool:
    return bool(bot_user_id) and (f"<@{bot_user_id}>" in text or f"<@{bot_user_id}|" in text)


def plain_text(text: str, bot_user_id: str) -> str:
    """Slack's markup as the model should read it: the bot's own mention removed, other
    mentions, channels and links spelled out, ``&lt; &gt; &amp;`` unescaped."""

    def spell(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("@"):
            return "" if target[1:] == bot_user_id else "@" + (label or target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            return label or "@" + target[1:].split("^")[0]
        url = target.removeprefix("mailto:")
        return url if not label or label == url else f"{label} ({url})"

    out = _LINK.sub(spell, text)
    for entity, char in _ENTITIES:
        out = out.replace(entity, char)
    return re.sub(r"[ \t]{2,}", " ", out).strip()


def files_of(files: Any) -> tuple[Attachment, ...]:
    if not isinstance(files, list):
        return ()
    out = []
    for f in files:
        if not isinstance(f, Mapping) or f.get("mode") == "tombstone":
            continue
        mime = _str(f.get("mimetype"))
        size = f.get("size")
        out.append(
            Attachment(
                kind=_kind(mime),
                file_id=_str(f.get("id")),
                name=_str(f.get("name")) or _str(f.get("title")),
                mime_type=mime,
                size=size if isinstance(size, int) else 0,
                url=_str(f.get("url_private_download")) or _str(f.get("url_private")),
            )
        )
    return tuple(out)


def _kind(mime: str) -> str:
    major = mime.partition("/")[0]
    return {"image": "image", "audio": "audio", "video": "video"}.get(major, "document")


def _with_file_notes(text: str, attachments: tuple[Attachment, ...]) -> str:
    # the model sees text only: name what came with the message so it is not silently missing
    notes = [
        f"[attached file: {a.name or a.file_id} ({a.mime_type or a.kind})]" for a in attachments
    ]
    return "\n".join([text, *notes]).strip() if notes else text


def _user_name(profile: Any, user: str) -> str:
    if isinstance(profile, Mapping):
        for key in ("display_name", "real_name", "name"):
            if value := _str(profile.get(key)):
                return value
    return user


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
