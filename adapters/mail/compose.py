"""A reply mail: "Re:" subject, the threading headers, plain text and HTML
(multipart/alternative), and a Message-ID derived from the part's idempotency key, which is
what the sent-check looks for after a crash."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formataddr, formatdate

from hermes_gateway.platforms import (
    RULE_TEXT,
    HtmlStyle,
    Target,
    html_block,
    join_blocks,
    parse_blocks,
    split_rendered,
)

ID_PREFIX = "hermes."  # every Message-ID the bot writes starts so
NEW_SUBJECT = "A message from Hermes"
# Markdown is split as it is: the plain part is the Markdown, the HTML part is rendered from it
_AS_IS = Target(lambda s: s, lambda s: s, lambda s: s)
# tables as monospace text and the rule as a line of text: what every mail client shows alike
_STYLE = HtmlStyle(rule=f"<p>{RULE_TEXT}</p>")


@dataclass(frozen=True, slots=True)
class Thread:
    """Where a reply goes: to whom, under what subject, answering which mail of which chain."""

    to: str
    subject: str
    parent: str | None = None  # the Message-ID answered
    references: tuple[str, ...] = ()  # the chain before the parent


def message_id(key: str | None, domain: str) -> str:
    """The Message-ID of a part: the same for every attempt to send it (its key), so the
    sent-check can find it; random for a message answering nothing."""
    return f"{ID_PREFIX}{key or secrets.token_hex(12)}@{domain}"


def is_ours(mail_id: str, domain: str) -> bool:
    return mail_id.startswith(ID_PREFIX) and mail_id.endswith("@" + domain)


def reply_subject(subject: str) -> str:
    if not subject:
        return NEW_SUBJECT
    return subject if subject[:3].lower() == "re:" else f"Re: {subject}"


def split(text: str, limit: int) -> list[str]:
    return split_rendered(text, limit, _AS_IS) or [text]


def compose(sender: str, from_name: str, thread: Thread, text: str, mail_id: str) -> EmailMessage:
    """One mail of a reply, threaded under ``thread.parent``."""
    message = EmailMessage()
    message["From"] = formataddr((from_name, sender))
    message["To"] = thread.to
    message["Subject"] = reply_subject(thread.subject) if thread.parent else thread.subject
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = f"<{mail_id}>"
    if thread.parent:
        message["In-Reply-To"] = f"<{thread.parent}>"
        chain = [*thread.references, thread.parent][-20:]
        message["References"] = " ".join(f"<{ref}>" for ref in chain)
    # RFC 3834: an automatic answer says so, so other robots do not answer it in turn
    message["Auto-Submitted"] = "auto-replied"
    message.set_content(text)
    message.add_alternative(to_html(text), subtype="html")
    return message


def to_html(md: str) -> str:
    body = join_blocks(parse_blocks(md), lambda block: html_block(block, _STYLE))
    return (
        f'<!DOCTYPE html><html><body><div style="font-family:sans-serif">{body}</div></body></html>'
    )
