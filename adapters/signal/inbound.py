"""signal-cli ``receive`` envelopes -> `MessageEvent`s (DMs and group messages with text or
attachments), and the evidence of this account's own sends (receipts, sent transcripts) that
the sent-check reads; every other envelope (typing, reactions, edits, odd shapes) is ignored."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.signal.ledger import Seen, digest
from hermes_gateway.platforms import Attachment, Inbound, MessageEvent

GROUP = "group."  # a group's chat id is its base64 id after this prefix
MENTION_MARK = "\ufffc"  # where Signal puts a mention in the text


@dataclass(frozen=True, slots=True)
class Me:
    """The bot's account: its number, and its ACI (uuid) when the daemon says it."""

    number: str
    uuid: str = ""

    def is_me(self, *ids: object) -> bool:
        return any(i and i in (self.number, self.uuid) for i in ids)


def message_id(author: str, ts: int) -> str:
    """A Signal message is (author, timestamp): the id the inbox dedupes on and replies quote."""
    return f"{author}:{ts}"


def quoted(message_id: str) -> tuple[str, int] | None:
    """The (author, timestamp) a reply quotes, from a `message_id`; None if it is not one."""
    author, _, ts = message_id.rpartition(":")
    return (author, int(ts)) if author and ts.isdigit() else None


def target(chat_id: str) -> dict[str, Any]:
    """The ``recipient`` or ``groupId`` parameter that addresses ``chat_id``."""
    if chat_id.startswith(GROUP):
        return {"groupId": chat_id[len(GROUP) :]}
    return {"recipient": [chat_id]}


def normalize(envelope: Any, me: Me, *, per_user: bool = True) -> Inbound | None:
    """The event for a data message with text or attachments, or None to ignore it."""
    if not isinstance(envelope, Mapping):
        return None
    data = envelope.get("dataMessage")
    author = _str(envelope.get("sourceNumber")) or _str(envelope.get("source"))
    author = author or _str(envelope.get("sourceUuid"))
    ts = envelope.get("timestamp")
    if not isinstance(data, Mapping) or not author or not isinstance(ts, int) or not _ts(ts):
        return None
    if data.get("reaction") is not None or data.get("remoteDelete") is not None:
        return None
    attachments = _attachments(data.get("attachments"))
    body, mentioned = _text(data, me)
    if not body and not attachments:
        return None
    group = data.get("groupInfo")
    group_id = _str(group.get("groupId")) if isinstance(group, Mapping) else ""
    quote = data.get("quote")
    replied_to_me = isinstance(quote, Mapping) and me.is_me(
        _str(quote.get("authorNumber")), _str(quote.get("authorUuid")), _str(quote.get("author"))
    )
    event = MessageEvent.create(
        platform="signal",
        chat_type="group" if group_id else "dm",
        chat_id=GROUP + group_id if group_id else author,
        user_id=author,
        message_id=message_id(author, ts),
        text=_with_file_notes(body, attachments),
        per_user=per_user,
        user_name=_str(envelope.get("sourceName")) or author,
        attachments=attachments,
        mentioned=not group_id or mentioned or replied_to_me,
    )
    from_self = me.is_me(author, _str(envelope.get("sourceUuid")))
    return Inbound(event, from_self=from_self)


def evidence(envelope: Any) -> list[Seen]:
    """What a receipt or a sent transcript says about this account's sends."""
    if not isinstance(envelope, Mapping):
        return []
    sender = _str(envelope.get("sourceNumber")) or _str(envelope.get("source"))
    receipt = envelope.get("receiptMessage")
    if isinstance(receipt, Mapping) and sender:
        stamps = receipt.get("timestamps")
        return [Seen(sender, t) for t in stamps or [] if _ts(t)] if isinstance(stamps, list) else []
    sync = envelope.get("syncMessage")
    sent = sync.get("sentMessage") if isinstance(sync, Mapping) else None
    if not isinstance(sent, Mapping) or not _ts(sent.get("timestamp")):
        return []
    group = sent.get("groupInfo")
    group_id = _str(group.get("groupId")) if isinstance(group, Mapping) else ""
    chat = GROUP + group_id if group_id else _str(sent.get("destinationNumber"))
    chat = chat or _str(sent.get("destination"))
    text = _str(sent.get("message"))
    return [Seen(chat, int(sent["timestamp"]), digest(text))] if chat else []


def _text(data: Mapping[str, Any], me: Me) -> tuple[str, bool]:
    """The message's text with mentions spelled out (the bot's own removed), and whether the
    bot was mentioned."""
    text = _str(data.get("message"))
    mentions = data.get("mentions")
    if not isinstance(mentions, list):
        return text.strip(), False
    mentioned = False
    spans = []
    for m in mentions:
        if not isinstance(m, Mapping) or not _index(m.get("start")) or not _index(m.get("length")):
            continue
        mine = me.is_me(_str(m.get("number")), _str(m.get("uuid")))
        mentioned = mentioned or mine
        name = "" if mine else "@" + (_str(m.get("name")) or _str(m.get("number")) or "someone")
        spans.append((int(m["start"]), int(m["length"]), name))
    for start, length, name in sorted(spans, reverse=True):
        if start + length <= len(text):
            text = text[:start] + name + text[start + length :]
    return " ".join(text.replace(MENTION_MARK, "").split(" ")).strip(), mentioned


def _attachments(raw: Any) -> tuple[Attachment, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for a in raw:
        if not isinstance(a, Mapping) or not _str(a.get("id")):
            continue
        mime = _str(a.get("contentType"))
        size = a.get("size")
        out.append(
            Attachment(
                kind=_kind(mime),
                file_id=_str(a.get("id")),
                name=_str(a.get("filename")) or _str(a.get("id")),
                mime_type=mime,
                size=size if isinstance(size, int) and size >= 0 else 0,
            )
        )
    return tuple(out)


def _kind(mime: str) -> str:
    if mime.startswith("audio/aac") or mime == "audio/ogg":
        return "voice"
    return {"image": "image", "audio": "audio", "video": "video"}.get(
        mime.partition("/")[0], "document"
    )


def _with_file_notes(text: str, attachments: tuple[Attachment, ...]) -> str:
    # the model sees text only: name what came with the message, to be fetched on demand
    notes = [
        f"[attached file: {a.name} ({a.mime_type or a.kind}, {a.size} bytes)]" for a in attachments
    ]
    return "\n".join([text, *notes]).strip() if notes else text


def _ts(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
