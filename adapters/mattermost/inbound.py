"""Mattermost posts -> `MessageEvent`: DMs, channel posts that mention the bot or answer in a
thread it is in, threads (``root_id``) as sessions, files named to the model; system posts,
deleted posts and odd shapes yield None."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hermes_gateway.platforms import Attachment, BotIdentity, ChatType, Inbound, MessageEvent

JsonDict = dict[str, Any]
DIRECT = "D"  # channel types: D direct, G group message, O public, P private


@dataclass(frozen=True, slots=True)
class Posted:
    """One post as it came: from a ``posted`` WebSocket event (with the event's extras) or
    from the REST catch-up (the channel's type looked up)."""

    post: Mapping[str, Any]
    channel_type: str
    sender_name: str = ""
    mentions: tuple[str, ...] = ()

    @property
    def channel_id(self) -> str:
        return _str(self.post.get("channel_id"))

    @property
    def create_at(self) -> int:
        value = self.post.get("create_at")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0


def from_event(event: Any) -> Posted | None:
    """The post of a ``posted`` event, whose ``data.post`` is the post as a JSON string."""
    if not isinstance(event, Mapping) or event.get("event") != "posted":
        return None
    data = event.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get("post"), str):
        return None
    try:
        post = json.loads(data["post"])
        mentions = json.loads(data["mentions"]) if isinstance(data.get("mentions"), str) else []
    except ValueError:
        return None
    if not isinstance(post, dict):
        return None
    ids = tuple(m for m in mentions if isinstance(m, str)) if isinstance(mentions, list) else ()
    return Posted(post, _str(data.get("channel_type")), _str(data.get("sender_name")), ids)


def thread_of(post: Mapping[str, Any]) -> str:
    """The thread a post is in: its root's id, or its own for a root post."""
    return _str(post.get("root_id")) or _str(post.get("id"))


def normalize(
    posted: Posted, me: BotIdentity, files_url: str, in_thread: bool, *, per_user: bool = True
) -> Inbound | None:
    """The event for a user's post, or None to ignore it. Channel posts are thread-scoped: a
    root post starts a thread under it, so the conversation and its session live there; in a
    direct channel the conversation is the channel, or the thread a reply is in.
    ``in_thread``: the bot is in the post's thread (a reply there needs no mention)."""
    post = posted.post
    post_id, channel, user = _str(post.get("id")), posted.channel_id, _str(post.get("user_id"))
    if not post_id or not channel or not user or _str(post.get("type")):
        return None  # system posts (joins, header changes) have a type
    if post.get("delete_at") not in (None, 0):
        return None
    root = _str(post.get("root_id"))
    text = _str(post.get("message"))
    dm = posted.channel_type == DIRECT
    chat_type: ChatType = "dm" if dm else "thread"
    attachments = files_of(post, files_url)
    named = mentions(text, me.username) or me.user_id in posted.mentions
    props = post.get("props")
    from_bot = isinstance(props, Mapping) and str(props.get("from_bot") or "") == "true"
    event = MessageEvent.create(
        platform="mattermost",
        chat_type=chat_type,
        chat_id=channel,
        user_id=user,
        message_id=post_id,
        text=_with_file_notes(plain_text(text, me.username), attachments),
        thread_id=(root or None) if dm else (root or post_id),
        per_user=per_user,
        user_name=posted.sender_name.lstrip("@") or user,
        attachments=attachments,
        reply_to=root or None,
        mentioned=dm or named or (bool(root) and in_thread),
    )
    return Inbound(event, from_self=me.is_me(user), from_bot=from_bot)


def mentions(text: str, username: str) -> bool:
    return bool(username) and _mention(username).search(text) is not None


def plain_text(text: str, username: str) -> str:
    """The message as the model should read it: the bot's own @mention removed."""
    if username:
        text = _mention(username).sub("", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _mention(username: str) -> re.Pattern[str]:
    # a username may hold dots, dashes and underscores; a trailing dot ends the sentence
    return re.compile(rf"(?<![\w@.-])@{re.escape(username)}(?![\w-]|\.\w)", re.IGNORECASE)


def files_of(post: Mapping[str, Any], files_url: str) -> tuple[Attachment, ...]:
    """The post's files, named and sized from ``metadata.files`` when the server sent it
    (a post from the catch-up does too), else by id alone (their info is asked on download)."""
    metadata = post.get("metadata")
    infos = metadata.get("files") if isinstance(metadata, Mapping) else None
    by_id: dict[str, Mapping[str, Any]] = {}
    for info in infos if isinstance(infos, list) else []:
        if isinstance(info, Mapping) and _str(info.get("id")):
            by_id[_str(info.get("id"))] = info
    ids = post.get("file_ids")
    order = [i for i in ids if isinstance(i, str) and i] if isinstance(ids, list) else []
    out = []
    for file_id in dict.fromkeys([*order, *by_id]):
        info = by_id.get(file_id, {})
        mime, size = _str(info.get("mime_type")), info.get("size")
        out.append(
            Attachment(
                kind=_kind(mime),
                file_id=file_id,
                name=_str(info.get("name")),
                mime_type=mime,
                size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
                url=f"{files_url}/{file_id}",
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


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
