"""The parsed-Markdown model (`markup` parses into these nodes), what every platform's renderer
shares (plain text, monospace tables, HTML escaping, joining blocks), and the fitting of
rendered parts to a size limit. Each platform package renders the nodes its own way."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from html import escape

from hermes_gateway.text.splitter import iter_chunks, split_message, utf16_len


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Code:
    text: str


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    children: tuple[Inline, ...]


@dataclass(frozen=True, slots=True)
class Styled:
    """Emphasis: `tag` is ``b`` (strong), ``i`` (emphasis) or ``s`` (strikethrough)."""

    tag: str
    children: tuple[Inline, ...]


Inline = Text | Code | Link | Styled


@dataclass(frozen=True, slots=True)
class Paragraph:
    inline: tuple[Inline, ...]
    gap: bool = False  # a blank line separated it from the previous block


@dataclass(frozen=True, slots=True)
class Heading:
    inline: tuple[Inline, ...]
    gap: bool = False


@dataclass(frozen=True, slots=True)
class CodeBlock:
    lang: str
    code: str
    gap: bool = False


@dataclass(frozen=True, slots=True)
class Quote:
    blocks: tuple[Block, ...]
    gap: bool = False


@dataclass(frozen=True, slots=True)
class Table:
    rows: tuple[tuple[str, ...], ...]  # cells as plain text
    header: bool
    gap: bool = False


@dataclass(frozen=True, slots=True)
class Rule:
    gap: bool = False


Block = Paragraph | Heading | CodeBlock | Quote | Table | Rule

RULE_TEXT = "———"
# Telegram refuses or mangles hrefs that are not absolute URLs; others are shown as text.
SAFE_URL = re.compile(r"(?i)(?:https?|ftp|tg|mailto):[^\s<>]+")
CODE_LANG = re.compile(r"[\w+#.-]{1,32}")


def esc_html(text: str) -> str:
    """Text for HTML: ``& < >`` escaped, quotes kept."""
    return escape(text, quote=False)


def join_blocks(blocks: tuple[Block, ...] | list[Block], render_one: Callable[[Block], str]) -> str:
    """Rendered blocks, a blank line between two where the Markdown had one."""
    out: list[str] = []
    for block in blocks:
        if out:
            out.append("\n\n" if block.gap else "\n")
        out.append(render_one(block))
    return "".join(out)


def plain(nodes: tuple[Inline, ...]) -> str:
    """Inline nodes as plain text; a link keeps its URL in parentheses after its text."""
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text | Code):
            out.append(node.text)
        elif isinstance(node, Styled):
            out.append(plain(node.children))
        else:
            label = plain(node.children)
            out.append(label if label == node.url else f"{label} ({node.url})".lstrip())
    return "".join(out)


def _width(text: str) -> int:
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )


def table_text(table: Table) -> str:
    """A table as aligned monospace text, with a rule under the header row."""
    columns = max(len(row) for row in table.rows)
    rows = [row + ("",) * (columns - len(row)) for row in table.rows]
    widths = [max(_width(row[c]) for row in rows) for c in range(columns)]
    lines = [
        " | ".join(cell + " " * (w - _width(cell)) for cell, w in zip(row, widths, strict=True))
        for row in rows
    ]
    if table.header and len(lines) > 1:
        lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def _table_pre(table: Table) -> str:
    return f"<pre>{esc_html(table_text(table))}</pre>"


@dataclass(frozen=True, slots=True)
class HtmlStyle:
    """What a platform that takes ordinary HTML (Matrix's ``formatted_body``, an email's HTML
    part) chooses in `html_block`'s rendering: each emphasis's element, tables, the rule."""

    tags: Mapping[str, str] = field(default_factory=dict)  # `Styled.tag` -> element (else itself)
    table: Callable[[Table], str] = _table_pre
    rule: str = "<hr>"


def html_inline(nodes: tuple[Inline, ...], style: HtmlStyle) -> str:
    """Inline nodes as HTML, always well-formed; a link to an unsafe URL is its plain text."""
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(esc_html(node.text).replace("\n", "<br>"))
        elif isinstance(node, Code):
            out.append(f"<code>{esc_html(node.text)}</code>")
        elif isinstance(node, Styled):
            tag = style.tags.get(node.tag, node.tag)
            out.append(f"<{tag}>{html_inline(node.children, style)}</{tag}>")
        elif not SAFE_URL.fullmatch(node.url):
            out.append(esc_html(plain((node,))))
        else:
            label = html_inline(node.children or (Text(node.url),), style)
            out.append(f'<a href="{escape(node.url)}">{label}</a>')
    return "".join(out)


def html_block(block: Block, style: HtmlStyle) -> str:
    """One block as HTML (``<p>``, ``<h3>``, ``<pre><code>``, ``<blockquote>``, ...)."""
    if isinstance(block, Paragraph):
        return f"<p>{html_inline(block.inline, style)}</p>"
    if isinstance(block, Heading):
        return f"<h3>{html_inline(block.inline, style)}</h3>"
    if isinstance(block, CodeBlock):
        lang = CODE_LANG.match(block.lang)
        attr = f' class="language-{lang.group()}"' if lang else ""
        return f"<pre><code{attr}>{esc_html(block.code)}</code></pre>"
    if isinstance(block, Quote):
        inner = join_blocks(block.blocks, lambda b: html_block(b, style))
        return f"<blockquote>{inner}</blockquote>"
    if isinstance(block, Table):
        return style.table(block)
    return style.rule


@dataclass(frozen=True, slots=True)
class Target:
    """One platform's output: its renderer, plain-text escaping, and what its users see."""

    render: Callable[[str], str]
    escape: Callable[[str], str]  # a piece as plain text, when no markup of it fits
    visible: Callable[[str], str]  # to drop parts that would show blank


MIN_LIMIT = 16


def split_rendered(md: str, limit: int, target: Target) -> list[str]:
    """Split Markdown first (fence-aware), then render each part; every part is at most
    `limit` UTF-16 units as rendered. Blank parts are dropped."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    parts: list[str] = []
    pending, md_limit = md, limit
    while pending:
        pending, md_limit = _render_some(pending, md_limit, limit, target, parts)
    return parts


def _render_some(
    md: str, md_limit: int, limit: int, target: Target, parts: list[str]
) -> tuple[str, int]:
    """Split `md` at `md_limit` units and render part after part into `parts`, until the
    Markdown budget needs changing; then return the rest of `md` and the new budget."""
    chunks = iter_chunks(md, md_limit, measure=utf16_len)
    chunk = next(chunks, None)
    while chunk is not None:
        following = next(chunks, None)
        rest = following.head + md[following.start :] if following else ""
        piece = chunk.render(md)
        rendered = target.render(piece)
        size = utf16_len(rendered)
        # Markup changes the size (tags, escapes, table padding; stripped markers): aim the
        # Markdown budget at what this piece's ratio predicts would fill a part.
        budget = utf16_len(piece) * limit * 19 // (max(size, 1) * 20)
        if size > limit:
            if budget >= MIN_LIMIT:
                return chunk.head + md[chunk.start :], budget
            parts.extend(_fallback(piece, limit, target))
            return rest, limit
        if target.visible(rendered).strip():
            parts.append(rendered)
        if rest and md_limit < limit and budget > md_limit * 5 // 4:
            return rest, min(limit, budget)  # markup-heavy text is over: fill parts again
        chunk = following
    return "", md_limit


def _fallback(piece: str, limit: int, target: Target) -> list[str]:
    """A piece whose markup cannot fit even when small: send its text, escaped, unformatted."""

    def measure(text: str) -> int:
        return utf16_len(target.escape(text))

    try:
        pieces = split_message(piece, limit, measure=measure)
    except ValueError:  # fence lines and one escaped character exceed a tiny limit
        pieces = _cut(piece, limit, measure)
    return [target.escape(p) for p in pieces]


def _cut(text: str, limit: int, measure: Callable[[str], int]) -> list[str]:
    """``text`` cut greedily into runs that measure at most ``limit``, fences ignored: the
    last resort of the fallback, for limits far below any platform's."""
    parts: list[str] = []
    current = ""
    for ch in text:
        if current and measure(current + ch) > limit:
            parts.append(current)
            current = ""
        current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]
