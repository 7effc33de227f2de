"""One fetched mail read into what the adapter needs: its id, thread, sender, text, the
attachments it names, and whether it is automatic traffic that must never be answered."""

from __future__ import annotations

import email
import email.policy
import hashlib
import re
from dataclasses import dataclass
from email.message import EmailMessage, Message

from adapters.mail.auth import sender

_ID = re.compile(r"<([^<>\s]+)>")
_TAG = re.compile(r"<[^>]*>")
_WROTE = re.compile(r"^On .{4,200} wrote:\s*$")
_LOOP_PRECEDENCE = ("bulk", "list", "junk")
_DAEMONS = ("mailer-daemon", "postmaster")
KEY_MAX = 128  # the inbox keeps a message id and a chat id in 128 characters each
DIGEST_PREFIX = "digest-"
NO_ID_PREFIX = "uid-"  # a mail without a Message-ID is keyed by its IMAP UID


def has_real_id(mail_id: str) -> bool:
    """Whether ``mail_id`` is a Message-ID a reply can name (not a digest or a UID key)."""
    return not mail_id.startswith((DIGEST_PREFIX, NO_ID_PREFIX))


def inbox_key(mail_id: str) -> str:
    """The mail's Message-ID as the inbox's key; a longer one than the inbox keeps is replaced
    by its digest (still the same for every copy of the mail)."""
    if len(mail_id) <= KEY_MAX:
        return mail_id
    return DIGEST_PREFIX + hashlib.blake2b(mail_id.encode(), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Part:
    """An attachment as the mail names it; ``index`` is its place in the MIME walk."""

    index: int
    name: str
    mime: str
    size: int


@dataclass(frozen=True, slots=True)
class Mail:
    message_id: str  # without angle brackets
    sender: str | None  # the one From address, folded; None when there is not exactly one
    subject: str
    references: tuple[str, ...]  # the thread before it, oldest first (References, In-Reply-To)
    text: str
    attachments: tuple[Part, ...]
    automatic: str  # why it is automatic traffic ("" when a person wrote it)

    @property
    def thread_root(self) -> str:
        return self.references[0] if self.references else self.message_id

    @property
    def thread_key(self) -> str:
        """The thread as a short, stable session key part."""
        return hashlib.blake2b(self.thread_root.encode(), digest_size=8).hexdigest()


def headers_of(raw: bytes) -> Message:
    """The mail with its headers as written (compat32: nothing decoded), for the checks that
    must see what the sender wrote."""
    return email.message_from_bytes(raw)


def read_mail(raw: bytes, fallback_id: str) -> tuple[Message, Mail]:
    """Read ``raw``; a mail without a Message-ID gets ``fallback_id`` (its IMAP UID)."""
    head = headers_of(raw)
    body = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(body, EmailMessage)
    ids = _ids(head.get("Message-ID", ""))
    mail = Mail(
        message_id=ids[0] if ids else fallback_id,
        sender=sender(head),
        subject=_subject(body),
        references=read_references(head),
        text=_text(body),
        attachments=tuple(_attachments(body)),
        automatic=automatic(head),
    )
    return head, mail


def _ids(value: object) -> list[str]:
    """The message ids in a header; raw 8-bit ones (a sender's, never a server's) are left
    out: they cannot be stored as keys nor written into a reply's headers."""
    return [found for found in _ID.findall(str(value or "")) if found.isascii()]


def read_references(head: Message) -> tuple[str, ...]:
    chain = _ids(head.get("References", ""))
    for parent in _ids(head.get("In-Reply-To", ""))[:1]:
        if parent not in chain:
            chain.append(parent)
    return tuple(chain[:100])


def subject_of(raw: bytes) -> str:
    """The decoded Subject of a mail (or of its header block alone)."""
    body = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(body, EmailMessage)
    return _subject(body)


def _subject(body: EmailMessage) -> str:
    try:
        return " ".join(str(body.get("Subject", "") or "").split())[:300]
    except (ValueError, TypeError, LookupError):
        return ""


def automatic(head: Message) -> str:
    """Why a mail is an auto-reply, a bounce or list traffic (never answered, so two robots
    cannot answer each other forever), or "" for a mail a person wrote."""
    submitted = str(head.get("Auto-Submitted", "") or "").split(";")[0].strip().lower()
    if head.get("Auto-Submitted") is not None and submitted != "no":
        return f"Auto-Submitted: {submitted}"
    precedence = str(head.get("Precedence", "") or "").strip().lower()
    if precedence in _LOOP_PRECEDENCE:
        return f"Precedence: {precedence}"
    for name in ("List-Id", "List-Unsubscribe", "X-Autoreply", "X-Autorespond"):
        if head.get(name) is not None:
            return name
    return_path = head.get_all("Return-Path") or []
    if any(str(v).strip() in ("<>", "") for v in return_path):
        return "Return-Path: <>"
    if head.get_content_type() == "multipart/report":
        return "a delivery report"
    who = str(head.get("From", "") or "").lower()
    if any(f"{d}@" in who for d in _DAEMONS):
        return "a mailer-daemon sender"
    return ""


def _text(body: EmailMessage) -> str:
    """The new text of the mail: its plain text (or its HTML's text), without the quoted
    mail it answers."""
    try:
        part = body.get_body(preferencelist=("plain", "html"))
        content = part.get_content() if part is not None else ""
    except (LookupError, ValueError, TypeError, AttributeError):
        return ""
    if not isinstance(content, str):
        return ""
    if part is not None and part.get_content_type() == "text/html":
        content = _TAG.sub("", re.sub(r"(?i)<br\s*/?>|</p>", "\n", content))
    return _without_quote(content)


def _without_quote(text: str) -> str:
    kept: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith(">") or _WROTE.match(line.strip()):
            continue
        if line.rstrip() == "--":
            break  # the signature
        kept.append(line)
    return "\n".join(kept).strip()


def _attachments(body: EmailMessage) -> list[Part]:
    found: list[Part] = []
    for index, part in enumerate(body.walk()):
        if part.is_multipart():
            continue
        name = part.get_filename()
        if not name and part.get_content_disposition() != "attachment":
            continue
        payload = part.get_payload(decode=True)
        size = len(payload) if isinstance(payload, bytes) else 0
        found.append(Part(index, str(name or f"attachment-{index}"), part.get_content_type(), size))
    return found


def part_bytes(raw: bytes, index: int) -> tuple[str, bytes] | None:
    """The attachment at ``index`` of the MIME walk: its content type and decoded bytes."""
    body = email.message_from_bytes(raw, policy=email.policy.default)
    for at, part in enumerate(body.walk()):
        if at == index and not part.is_multipart():
            payload = part.get_payload(decode=True)
            return (part.get_content_type(), payload) if isinstance(payload, bytes) else None
    return None


def kind_of(mime: str) -> str:
    major = mime.partition("/")[0]
    return major if major in ("image", "audio", "video") else "document"
