"""A reply mail: "Re:" subject, the threading headers, plain text and HTML
(multipart/alternative), and a Message-ID derived from the part's idempotency key, which is
what the sent-check looks for after a crash."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formataddr, formatdate
from html import escape

from hermes_gateway.platforms import (
    CODE_LANG,
    RULE_TEXT,
    SAFE_URL,
    Block,
    Code,
    CodeBlock,
    Heading,
    Inline,
    Paragraph,
    Quote,
    Styled,
    Table,
    Target,
    Text,
    esc_html,
    join_blocks,
    parse_blocks,
    plain,
    split_rendered,
    table_text,
)

ID_PREFIX = "hermes."  # every Message-ID the bot writes starts so
NEW_SUBJECT = "A message from Hermes"
# Markdown is split as it is: the plain part is the Markdown, the HTML part is rendered from it
_AS_IS = Target(lambda s: s, lambda s: s, lambda s: s)


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
    body = join_blocks(parse_blocks(md), _block)
    return (
        f'<!DOCTYPE html><html><body><div style="font-family:sans-serif">{body}</div></body></html>'
    )


def _inline(nodes: tuple[Inline, ...]) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(esc_html(node.text).replace("\n", "<br>"))
        elif isinstance(node, Code):
            out.append(f"<code>{esc_html(node.text)}</code>")
        elif isinstance(node, Styled):
            out.append(f"<{node.tag}>{_inline(node.children)}</{node.tag}>")
        elif not SAFE_URL.fullmatch(node.url):
            out.append(esc_html(plain((node,))))
        else:
            label = _inline(node.children or (Text(node.url),))
            out.append(f'<a href="{escape(node.url)}">{label}</a>')
    return "".join(out)


def _block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{_inline(block.inline)}</p>"
    if isinstance(block, Heading):
        return f"<h3>{_inline(block.inline)}</h3>"
    if isinstance(block, CodeBlock):
        lang = CODE_LANG.match(block.lang)
        cls = f' class="language-{lang.group()}"' if lang else ""
        return f"<pre><code{cls}>{esc_html(block.code)}</code></pre>"
    if isinstance(block, Quote):
        return f"<blockquote>{join_blocks(block.blocks, _block)}</blockquote>"
    if isinstance(block, Table):
        return f"<pre>{esc_html(table_text(block))}</pre>"
    return f"<p>{RULE_TEXT}</p>"
