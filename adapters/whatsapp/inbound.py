"""Cloud API webhook payloads -> what the gateway acts on: each message as an `Inbound` (text,
replies, reactions, media named to the model), each status with the key a reply part carried
(``biz_opaque_callback_data``), and the errors Meta reports. Odd shapes are skipped, not raised."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from hermes_gateway.platforms import Attachment, Inbound, MessageEvent

log = structlog.get_logger("hermes.adapters.whatsapp")
# a message type -> the attachment kind the model is told (a voice note is audio with voice)
MEDIA_KINDS = {
    "image": "image",
    "document": "document",
    "audio": "audio",
    "video": "video",
    "sticker": "image",
}
PROVES_SENT = frozenset({"sent", "delivered", "read"})  # a status that says Meta took it


@dataclass(frozen=True, slots=True)
class Status:
    """A status webhook of one of our messages."""

    wamid: str
    status: str  # sent | delivered | read | failed
    recipient: str
    key: str  # the part's key it was sent with ("" for a message sent without one)
    error: str = ""  # a failed status's first error: "131047: Re-engagement message"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One webhook POST, taken apart."""

    messages: tuple[tuple[Mapping[str, Any], str], ...]  # (message, sender's profile name)
    statuses: tuple[Status, ...]
    errors: tuple[str, ...]
    foreign: int  # changes for another phone number of the account, skipped


def parse_delivery(body: Any, phone_number_id: str) -> Delivery:
    """``entry[].changes[].value`` of a delivery for our number; anything else skipped."""
    messages: list[tuple[Mapping[str, Any], str]] = []
    statuses: list[Status] = []
    errors: list[str] = []
    foreign = 0
    for value in _values(body):
        metadata = _map(value.get("metadata"))
        if _str(metadata.get("phone_number_id")) not in ("", phone_number_id):
            foreign += 1
            continue
        names = _names(value.get("contacts"))
        for message in _list(value.get("messages")):
            if isinstance(message, Mapping):
                messages.append((message, names.get(_str(message.get("from")), "")))
        statuses.extend(s for s in map(_status, _list(value.get("statuses"))) if s is not None)
        errors.extend(_error(e) for e in _list(value.get("errors")))
    return Delivery(tuple(messages), tuple(statuses), tuple(errors), foreign)


def _values(body: Any) -> Iterator[Mapping[str, Any]]:
    if not isinstance(body, Mapping) or body.get("object") != "whatsapp_business_account":
        return
    for entry in _list(body.get("entry")):
        for change in _list(_map(entry).get("changes")):
            change = _map(change)
            if change.get("field") == "messages" and isinstance(change.get("value"), Mapping):
                yield change["value"]


def normalize(message: Mapping[str, Any], profile_name: str) -> Inbound | None:
    """The `MessageEvent` of one message, or None for a kind the gateway does not answer
    (a removed reaction, a system notice, an unsupported type) or a malformed one."""
    sender, wamid, kind = (_str(message.get(k)) for k in ("from", "id", "type"))
    if not sender or not wamid:
        return None
    found = _content(kind, message)
    if found is None:
        log.info("whatsapp.ignored", type=kind[:40], message_id=wamid)
        return None
    text, attachments, reply_to = found
    context = _map(message.get("context"))
    event = MessageEvent.create(
        platform="whatsapp",
        chat_type="dm",
        chat_id=sender,
        user_id=sender,
        message_id=wamid,
        text=text,
        user_name=profile_name or sender,
        attachments=attachments,
        reply_to=reply_to or _str(context.get("id")) or None,
        mentioned=True,  # every WhatsApp chat with a business number is one to one
    )
    return Inbound(event)


Content = tuple[str, tuple[Attachment, ...], str]


def _content(kind: str, message: Mapping[str, Any]) -> Content | None:
    """(text for the model, attachments, the message it reacts to) of one message."""
    if kind == "text":
        body = _str(_map(message.get("text")).get("body"))
        return (body, (), "") if body else None
    if kind == "reaction":
        reaction = _map(message.get("reaction"))
        emoji, target = _str(reaction.get("emoji")), _str(reaction.get("message_id"))
        if not emoji:  # a reaction taken back
            return None
        return f"[reacted {emoji} to an earlier message]", (), target
    if kind in MEDIA_KINDS:
        media = _map(message.get(kind))
        attachment = _attachment(kind, media, _str(message.get("id")))
        if attachment is None:
            return None
        note = f"[attached {attachment.kind}: {attachment.name} ({attachment.mime_type})]"
        caption = _str(media.get("caption"))
        return "\n".join(t for t in (caption, note) if t), (attachment,), ""
    return None


def _attachment(kind: str, media: Mapping[str, Any], wamid: str) -> Attachment | None:
    media_id = _str(media.get("id"))
    if not media_id:
        return None
    mime = _str(media.get("mime_type")).partition(";")[0].strip()
    voice = kind == "audio" and media.get("voice") is True
    name = _str(media.get("filename")) or f"{'voice' if voice else kind}-{media_id[-12:]}"
    return Attachment(
        kind="voice" if voice else MEDIA_KINDS[kind],
        file_id=media_id,
        name=name,
        mime_type=mime,
    )


def _status(raw: Any) -> Status | None:
    raw = _map(raw)
    wamid, status = _str(raw.get("id")), _str(raw.get("status"))
    if not wamid or not status:
        return None
    errors = _list(raw.get("errors"))
    return Status(
        wamid,
        status,
        _str(raw.get("recipient_id")),
        _str(raw.get("biz_opaque_callback_data")),
        _error(errors[0]) if errors else "",
    )


def _error(raw: Any) -> str:
    raw = _map(raw)
    return f"{raw.get('code')}: {_str(raw.get('title')) or _str(raw.get('message'))}"[:300]


def _names(contacts: Any) -> dict[str, str]:
    out = {}
    for contact in _list(contacts):
        contact = _map(contact)
        if wa_id := _str(contact.get("wa_id")):
            out[wa_id] = _str(_map(contact.get("profile")).get("name"))
    return out


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
