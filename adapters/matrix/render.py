"""Matrix's rendering of the Markdown models write: ``org.matrix.custom.html`` for a message's
``formatted_body`` (only tags the spec's HTML subset has, always well-formed), its plain
``body`` beside it, and the split into parts within the adapter's limit."""

from __future__ import annotations

import re
from html import escape
from html.parser import HTMLParser
from typing import Any

from hermes_gateway.platforms import (
    HtmlStyle,
    Table,
    Target,
    esc_html,
    html_block,
    join_blocks,
    parse_blocks,
    split_rendered,
)

# UTF-16 units of HTML per message: an event is at most 64 KiB, and carries the text twice
LIMIT = 8000
_BLOCK_ENDS = frozenset({"p", "pre", "blockquote", "h1", "h2", "h3", "h4", "tr", "hr", "table"})


def _table(table: Table) -> str:
    rows = []
    for n, row in enumerate(table.rows):
        cell = "th" if table.header and n == 0 else "td"
        rows.append("<tr>" + "".join(f"<{cell}>{esc_html(c)}</{cell}>" for c in row) + "</tr>")
    return "<table>" + "".join(rows) + "</table>"


# the spec's HTML subset names emphasis by meaning
_STYLE = HtmlStyle(tags={"b": "strong", "i": "em", "s": "del"}, table=_table)


def to_matrix_html(md: str) -> str:
    return join_blocks(parse_blocks(md), lambda block: html_block(block, _STYLE))


class _Plain(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self.out.append("\n")
        elif tag == "hr":
            self.out.append("———")
        elif tag in ("td", "th") and self.out and not self.out[-1].endswith("\n"):
            self.out.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCK_ENDS:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if data.strip("\n"):
            self.out.append(data)
        else:  # between blocks: a block's end made its line, a blank line stays one
            self.out.append(data[1:])


def html_to_plain(html: str) -> str:
    """The ``body`` a client without HTML shows: the text, a line per block."""
    parser = _Plain()
    parser.feed(html)
    parser.close()
    return re.sub(r"\n{3,}", "\n\n", "".join(parser.out)).strip()


_TAG = re.compile(r"<[^>]*>")
_MATRIX = Target(to_matrix_html, lambda s: escape(s, quote=False), lambda s: _TAG.sub("", s))


def render(markdown: str) -> list[str]:
    """The reply as HTML parts, each within the limit, code fences closed and reopened."""
    return split_rendered(markdown, LIMIT, _MATRIX) or ["(empty reply)"]


def first_part(markdown: str) -> str:
    """What a live preview shows: the first part of the text so far."""
    parts = split_rendered(markdown, LIMIT, _MATRIX)
    return parts[0] if parts else ""


def content(html: str, msgtype: str = "m.text") -> dict[str, Any]:
    """A message's content: the plain body and the HTML beside it."""
    return {
        "msgtype": msgtype,
        "body": html_to_plain(html) or " ",
        "format": "org.matrix.custom.html",
        "formatted_body": html,
    }
