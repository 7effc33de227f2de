"""The normalized shapes that cross every seam: inbound `MessageEvent`, `OutboundMessage` (built
only through `OutboundMessage.to`), and the one function that builds a `session_key`."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

ChatType = Literal["dm", "group", "channel", "thread"]
# who wrote an inbound message, as its adapter saw it: the bot's own messages and other bots'
# are refused by admission (other bots are let in only where a platform allows them)
Sender = Literal["user", "self", "bot"]
CHAT_TYPES: tuple[str, ...] = ("dm", "group", "channel", "thread")


def build_session_key(
    platform: str,
    chat_type: str,
    chat_id: str,
    thread_id: str | None = None,
    user_id: str | None = None,
    *,
    per_user: bool = True,
) -> str:
    """``<platform>:<chat_type>:<chat_id>[:<thread_id>][:<user_id>]``: the unit of routing,
    caching, concurrency and persistence.

    DMs are keyed by chat; a group or channel gets one session per user when ``per_user``
    (``runner.group_sessions_per_user``); a thread or topic is one session shared by its
    participants.
    """
    if chat_type not in CHAT_TYPES:
        raise ValueError(f"unknown chat_type {chat_type!r}")
    parts = [platform, chat_type, str(chat_id)]
    if thread_id:
        parts.append(str(thread_id))
    if per_user and user_id and chat_type in ("group", "channel") and not thread_id:
        parts.append(str(user_id))
    return ":".join(parts)


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """``text`` with lone surrogates (JSON's ``"\\ud800"``: valid JSON, not encodable text)
    replaced by U+FFFD, so storing, logging and sending it cannot fail on encoding."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file that came with a message; `path` is set once it has been downloaded."""

    kind: str  # image | document | audio | voice | video | other
    file_id: str = ""
    name: str = ""
    mime_type: str = ""
    size: int = 0
    url: str = ""
    path: str = ""
    duration: float = 0.0  # seconds, for voice and audio when the platform says (0: unknown)


@dataclass(frozen=True, slots=True)
class MessageEvent:
    """One inbound chat message, normalized by an adapter."""

    platform: str
    chat_type: ChatType
    chat_id: str
    user_id: str
    message_id: str
    text: str
    session_key: str
    thread_id: str | None = None
    user_name: str = ""
    attachments: tuple[Attachment, ...] = ()
    reply_to: str | None = None
    mentioned: bool = False
    received_at: float = field(default_factory=time.time)
    # what the adapter needs to answer this message after a restart too (a Discord slash
    # command's interaction), opaque here; it may hold a credential, so it stays out of repr
    reply_context: str = field(default="", repr=False, compare=False)
    # the conversation so far as the client sent it (a stateless API request): the run uses it
    # as the history instead of the session's stored one
    history: tuple[Mapping[str, Any], ...] = field(default=(), repr=False, compare=False)
    # the W3C traceparent of its `message` span when traces are on ("" else): kept with its
    # inbox row, not in its payload, so a carried or replayed run can find its trace
    trace: str = field(default="", repr=False, compare=False)

    @classmethod
    def create(
        cls,
        *,
        platform: str,
        chat_type: ChatType,
        chat_id: str,
        user_id: str,
        message_id: str,
        text: str,
        thread_id: str | None = None,
        per_user: bool = True,
        **extra: object,
    ) -> MessageEvent:
        """Build an event and its session key in one step, so adapters cannot disagree."""
        key = build_session_key(platform, chat_type, chat_id, thread_id, user_id, per_user=per_user)
        return cls(
            platform=platform,
            chat_type=chat_type,
            chat_id=str(chat_id),
            user_id=str(user_id),
            message_id=str(message_id),
            text=text,
            session_key=key,
            thread_id=str(thread_id) if thread_id else None,
            **extra,  # type: ignore[arg-type]
        )


def encodable(event: MessageEvent) -> MessageEvent:
    """``event`` with lone surrogates out of its text and sender name: valid in JSON from any
    platform, they would fail the store, the logs and the model request far from their source."""
    text, name = without_surrogates(event.text), without_surrogates(event.user_name)
    if text is event.text and name is event.user_name:
        return event
    return replace(event, text=text, user_name=name)


OutboundKind = Literal["reply", "notice", "error"]
FileKind = Literal["image", "audio", "voice", "document"]


@dataclass(frozen=True, slots=True)
class OutboundFile:
    """A file of the workspace that goes with a reply, after its text (`send_file`). ``path``
    was checked when the model asked; the file is read when its part is sent, so a later change
    to it is what goes out."""

    path: str  # resolved, inside the session's workspace
    name: str  # the name the user sees
    caption: str = ""
    kind: FileKind = "document"


PartSent = Callable[[int], Awaitable[None]]  # (parts delivered so far) -> None
# (index of the part about to go out, the adapter's reference it will come after) -> None
PartSending = Callable[[int, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A reply (or a notice about a message) to deliver where the conversation is.

    `answers` lists the inbound message ids this text settles: one for a plain reply, several
    for a merged turn; the first is the one a platform quotes. An adapter that splits the text
    skips the first `skip_parts` parts (an earlier attempt delivered them) and awaits
    `on_part(parts delivered)` after each part that has more after it, and `on_sending(index,
    after)` before each part goes out (the intent a crash leaves behind). `doubt` is set when
    the part at `skip_parts` may already have gone out (its send was cut short by a crash): the
    adapter's reference recorded with that intent; the adapter checks before sending it again
    (docs/exactly-once.md). `outcome` (the run's
    status, or why a message was dropped), `error` and `usage` are for adapters that answer
    in a machine-readable way (the local API); chat platforms show only `text`.
    """

    platform: str
    chat_id: str
    text: str
    session_key: str
    thread_id: str | None = None
    answers: tuple[str, ...] = ()
    kind: OutboundKind = "reply"
    run_id: str = ""
    skip_parts: int = 0
    on_part: PartSent | None = field(default=None, compare=False, repr=False)
    on_sending: PartSending | None = field(default=None, compare=False, repr=False)
    doubt: str | None = None
    outcome: str = ""
    error: str = ""
    usage: Mapping[str, int] = field(default_factory=dict, compare=False)
    files: tuple[OutboundFile, ...] = ()  # sent after the text parts, one part each, in order

    @property
    def reply_to(self) -> str | None:
        return self.answers[0] if self.answers else None

    @classmethod
    def to(
        cls,
        where: MessageEvent | Chat,
        text: str,
        kind: OutboundKind = "reply",
        *,
        answers: tuple[str, ...] | None = None,
        run_id: str = "",
        outcome: str = "",
        skip_parts: int = 0,
        error: str = "",
        usage: Mapping[str, int] | None = None,
        on_part: PartSent | None = None,
        files: tuple[OutboundFile, ...] = (),
    ) -> OutboundMessage:
        """The one way to build a message to send: to where ``where`` came from (its chat,
        thread and session), settling ``answers``: by default that message; ``()`` for an
        acknowledgement or a question that settles nothing. A `Chat` is a chat with no message
        to answer."""
        return cls(
            platform=where.platform,
            chat_id=where.chat_id,
            thread_id=where.thread_id,
            text=text,
            session_key=where.session_key,
            answers=(answers or ())
            if isinstance(where, Chat)
            else ((where.message_id,) if answers is None else answers),
            kind=kind,
            run_id=run_id,
            skip_parts=skip_parts,
            outcome=outcome,
            error=error,
            usage=usage if usage is not None else {},
            on_part=on_part,
            files=files,
        )


class Chat(NamedTuple):
    """A chat to write to with no message to answer in it (the welcome after pairing, a
    scheduled job's answer), optionally in a thread and on behalf of a session."""

    platform: str
    chat_id: str
    thread_id: str | None = None
    session_key: str = ""
