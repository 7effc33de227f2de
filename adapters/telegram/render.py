"""Telegram's rendering of the Markdown models write: HTML for `parse_mode=HTML` (only the tags
Telegram allows, always well-formed), split to its 4096-unit limit, and the plain text sent
when Telegram cannot parse it anyway."""

from __future__ import annotations

import re
from html import escape
from html.parser import HTMLParser

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


def telegram_inline(nodes: tuple[Inline, ...], in_link: bool = False) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(esc_html(node.text))
        elif isinstance(node, Code):
            # Telegram forbids code inside a link; the text still shows.
            out.append(esc_html(node.text) if in_link else f"<code>{esc_html(node.text)}</code>")
        elif isinstance(node, Styled):
            out.append(f"<{node.tag}>{telegram_inline(node.children, in_link)}</{node.tag}>")
        elif in_link or not SAFE_URL.fullmatch(node.url):
            out.append(esc_html(plain((node,))))
        else:
            label = telegram_inline(node.children or (Text(node.url),), True)
            out.append(f'<a href="{escape(node.url)}">{label or esc_html(node.url)}</a>')
    return "".join(out)


class TelegramRenderer:
    """Blocks to Telegram Bot API HTML; blockquotes are flattened since they cannot nest."""

    def __init__(self, in_quote: bool = False) -> None:
        self.in_quote = in_quote

    def __call__(self, block: Block) -> str:
        if isinstance(block, Paragraph):
            return telegram_inline(block.inline)
        if isinstance(block, Heading):
            return f"<b>{telegram_inline(block.inline)}</b>"
        if isinstance(block, CodeBlock):
            lang = CODE_LANG.match(block.lang)
            if lang is None:
                return f"<pre>{esc_html(block.code)}</pre>"
            return f'<pre><code class="language-{lang.group()}">{esc_html(block.code)}</code></pre>'
        if isinstance(block, Quote):
            inner = join_blocks(block.blocks, TelegramRenderer(in_quote=True))
            return inner if self.in_quote else f"<blockquote>{inner}</blockquote>"
        if isinstance(block, Table):
            return f"<pre>{esc_html(table_text(block))}</pre>"
        return RULE_TEXT


def render_telegram(blocks: list[Block]) -> str:
    return join_blocks(blocks, TelegramRenderer())


def to_telegram_html(md: str) -> str:
    """Markdown to Telegram HTML (``parse_mode=HTML``): always well-formed, only tags Telegram
    allows; unmatched markers stay literal text."""
    return render_telegram(parse_blocks(md))


class _PlainText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.links: list[tuple[str, int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append((dict(attrs).get("href") or "", len(self.out)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self.links:
            href, at = self.links.pop()
            if href and "".join(self.out[at:]) != href:
                self.out.append(f" ({href})")

    def handle_data(self, data: str) -> None:
        self.out.append(data)


def telegram_html_to_plain(html: str) -> str:
    """Tags stripped and entities decoded, for the plain-text retry when Telegram cannot parse
    the HTML; a link keeps its URL in parentheses after its text. Never longer than `html`."""
    parser = _PlainText()
    parser.feed(html)
    parser.close()
    return "".join(parser.out)


_TAG = re.compile(r"<[^>]*>")
# visible: the text without its tags is enough to tell a blank part (entities count as text);
# `telegram_html_to_plain` parses HTML properly and cost as much as the rendering itself
_TELEGRAM = Target(to_telegram_html, lambda s: escape(s, quote=False), lambda s: _TAG.sub("", s))


def split_rendered_telegram(md: str, limit: int = 4096) -> list[str]:
    """Split Markdown first (fence-aware), then render each part to Telegram HTML, re-splitting
    where the HTML outgrows `limit` UTF-16 units. Every part's raw HTML, hence also its text
    after entity parsing (what Telegram counts), is at most `limit` units."""
    return split_rendered(md, limit, _TELEGRAM)
