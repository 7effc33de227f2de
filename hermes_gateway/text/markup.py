"""Markdown as LLMs write it (CommonMark-ish plus GitHub tables and ~~strike~~) parsed into
the blocks and inline nodes of `hermes_gateway.text.render`, which each platform package
renders its own way (`adapters/telegram/render.py`, ...)."""

from __future__ import annotations

import re
import string
import unicodedata
from bisect import bisect_left
from dataclasses import dataclass

from hermes_gateway.text.render import (
    Block,
    Code,
    CodeBlock,
    Heading,
    Inline,
    Link,
    Paragraph,
    Quote,
    Rule,
    Styled,
    Table,
    Text,
    plain,
)
from hermes_gateway.text.splitter import (
    FENCE_LINE,
    fence_closed_by,
    fence_opened,
)

__all__ = ["parse_blocks", "parse_inline", "table_at"]

_SPECIAL = re.compile(r"[\\`\[<*_~]")
_BRACKET_SPECIAL = re.compile(r"[\\`\[\]]")
_ASCII_PUNCT = frozenset(string.punctuation)
_AUTOLINK = re.compile(r"<((?:https?|ftp|tg|mailto):[^\s<>]+)>", re.IGNORECASE)
_LINK_TAIL = re.compile(
    r"\(\s*(<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)"
)
_MAX_LINK_TEXT = 2000  # bounds the bracket search so many stray '[' stay linear-ish
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_RULE = re.compile(r"[ \t]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
_QUOTE = re.compile(r"[ \t]{0,3}(?:>[ \t]?)+")  # nested levels flattened: no platform nests
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(?=\S)", re.MULTILINE)
_DELIM_ROW = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass(slots=True)
class _Delim:
    char: str
    count: int
    can_open: bool
    can_close: bool


def _is_punct(char: str) -> bool:
    return unicodedata.category(char)[0] in "PS"


class _InlineParser:
    """Code spans first, then links, then emphasis delimiters (resolved by `_resolve`)."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.items: list[Inline | _Delim] = []
        self.buf: list[str] = []
        self.runs: dict[int, list[int]] = {}
        for m in re.finditer("`+", text):
            self.runs.setdefault(len(m.group()), []).append(m.start())

    def parse(self) -> tuple[Inline, ...]:
        s, i = self.s, 0
        while (m := _SPECIAL.search(s, i)) is not None:
            self.buf.append(s[i : m.start()])
            i = self._special(m.start())
        self.buf.append(s[i:])
        self._flush()
        return _resolve(self.items)

    def _flush(self) -> None:
        if text := "".join(self.buf):
            self.items.append(Text(text))
        self.buf.clear()

    def _push(self, item: Inline | _Delim, end: int) -> int:
        self._flush()
        self.items.append(item)
        return end

    def _special(self, i: int) -> int:
        s, char = self.s, self.s[i]
        if char == "\\":
            nxt = s[i + 1 : i + 2]
            self.buf.append(nxt if nxt and nxt in _ASCII_PUNCT else "\\")
            return i + 1 + (nxt in _ASCII_PUNCT and nxt != "")
        if char == "`":
            return self._code(i)
        if char == "[":
            return self._link(i)
        if char == "<":
            if m := _AUTOLINK.match(s, i):
                return self._push(Link(m.group(1), (Text(m.group(1)),)), m.end())
            self.buf.append(char)
            return i + 1
        return self._delim(i)

    def _run(self, i: int, char: str) -> int:
        j = i
        while j < len(self.s) and self.s[j] == char:
            j += 1
        return j - i

    def _closing_run(self, pos: int, size: int) -> int:
        starts = self.runs.get(size, [])
        k = bisect_left(starts, pos)
        return starts[k] if k < len(starts) else -1

    def _code(self, i: int) -> int:
        size = self._run(i, "`")
        close = self._closing_run(i + size, size)
        if close < 0:
            self.buf.append("`" * size)
            return i + size
        body = self.s[i + size : close].replace("\n", " ")
        if len(body) > 2 and body[0] == body[-1] == " " and body.strip():
            body = body[1:-1]
        return self._push(Code(body), close + size)

    def _bracket_end(self, i: int) -> int:
        depth, limit, pos = 0, min(len(self.s), i + _MAX_LINK_TEXT), i
        while (m := _BRACKET_SPECIAL.search(self.s, pos, limit)) is not None:
            j, char = m.start(), m.group()
            pos = j + 1
            if char == "\\":
                pos = j + 2
            elif char == "`":
                size = self._run(j, "`")
                close = self._closing_run(j + size, size)
                pos = close + size if close >= 0 else j + size
            elif char == "[":
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    return j
        return -1

    def _link(self, i: int) -> int:
        end = self._bracket_end(i)
        tail = _LINK_TAIL.match(self.s, end + 1) if end >= 0 else None
        if tail is None:
            self.buf.append("[")
            return i + 1
        url = tail.group(1)
        if url.startswith("<"):
            url = url[1:-1]
        children = _InlineParser(self.s[i + 1 : end]).parse()
        return self._push(Link(url, children), tail.end())

    def _delim(self, i: int) -> int:
        s, char = self.s, self.s[i]
        size = self._run(i, char)
        end = i + size
        prev = s[i - 1] if i > 0 else " "
        nxt = s[end] if end < len(s) else " "
        left = not nxt.isspace() and (not _is_punct(nxt) or prev.isspace() or _is_punct(prev))
        right = not prev.isspace() and (not _is_punct(prev) or nxt.isspace() or _is_punct(nxt))
        if char == "_" or (char == "*" and size == 1):
            # No emphasis inside words: snake_case_names and 2*3*4 stay as written.
            can_open = left and (not right or _is_punct(prev))
            can_close = right and (not left or _is_punct(nxt))
        else:  # `**` may be intraword, as CJK text writes bold with no spaces around it
            can_open, can_close = left, right
        if (char == "~" and size != 2) or not (can_open or can_close):
            self.buf.append(s[i:end])
            return end
        return self._push(_Delim(char, size, can_open, can_close), end)


def _literal(items: list[Inline | _Delim]) -> tuple[Inline, ...]:
    out: list[Inline] = []
    for item in items:
        if isinstance(item, _Delim):
            item = Text(item.char * item.count)
        if isinstance(item, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + item.text)
        else:
            out.append(item)
    return tuple(out)


def _resolve(items: list[Inline | _Delim]) -> tuple[Inline, ...]:
    """Pair emphasis delimiters (CommonMark's algorithm, simplified); the rest is literal."""
    out: list[Inline | _Delim] = []
    openers: list[int] = []  # indexes into `out` of delimiters that may open
    chars: list[str] = []  # their characters, to skip hopeless searches in O(1)-ish
    for item in items:
        if not isinstance(item, _Delim):
            out.append(item)
            continue
        while item.count and item.can_close and item.char in chars:
            k = len(chars) - 1 - chars[::-1].index(item.char)
            at = openers[k]
            opener = out[at]
            assert isinstance(opener, _Delim)
            use = 2 if item.char == "~" or min(opener.count, item.count) >= 2 else 1
            tag = "s" if item.char == "~" else "b" if use == 2 else "i"
            node = Styled(tag, _literal(out[at + 1 :]))
            del out[at + 1 :], openers[k + 1 :], chars[k + 1 :]
            opener.count -= use
            item.count -= use
            if not opener.count:
                del out[at], openers[k], chars[k]
            out.append(node)
        if item.count:
            if item.can_open:
                openers.append(len(out))
                chars.append(item.char)
            out.append(item)
    return _literal(out)


def parse_inline(text: str) -> tuple[Inline, ...]:
    return _InlineParser(text).parse()


def _cells(line: str) -> tuple[str, ...]:
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return tuple(plain(parse_inline(cell.strip())) for cell in _CELL_SPLIT.split(row))


def _pipe_row(line: str) -> bool:
    row = line.strip()
    return len(row) > 1 and row[0] == "|" and row[-1] == "|"


def table_at(lines: list[str], i: int, gap: bool = False) -> tuple[Table, int] | None:
    """The table starting at line `i` and the index after it: a GitHub table (header and
    delimiter rows), or a run of ``|...|`` rows (a table whose header went to an earlier part).
    """
    if "|" not in lines[i]:
        return None
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    if "|" in nxt and _DELIM_ROW.fullmatch(nxt):
        rows, end, header = [_cells(lines[i])], i + 2, True
    elif _pipe_row(lines[i]):
        rows, end, header = [], i, False
    else:
        return None
    while end < len(lines) and (_pipe_row(lines[end]) or (header and "|" in lines[end])):
        rows.append(_cells(lines[end]))
        end += 1
    return Table(tuple(rows), header, gap), end


class _BlockParser:
    """A line-oriented block parser: fences, headings, rules, quotes, tables, paragraphs."""

    def __init__(self, md: str) -> None:
        self.lines = md.replace("\r\n", "\n").split("\n")
        self.blocks: list[Block] = []
        self.para: list[str] = []
        self.gap = False

    def parse(self) -> list[Block]:
        i = 0
        while i < len(self.lines):
            line = self.lines[i]
            if not line.strip():
                self._flush()
                self.gap, i = True, i + 1
                continue
            found = self._block(i)
            if found is None:
                self.para.append(line)
                i += 1
                continue
            self._flush()
            self.blocks.append(found[0])
            self.gap, i = False, found[1]
        self._flush()
        return self.blocks

    def _flush(self) -> None:
        if self.para:
            text = _BULLET.sub(r"\1• ", "\n".join(self.para))
            self.blocks.append(Paragraph(parse_inline(text), self.gap))
            self.para, self.gap = [], False

    def _block(self, i: int) -> tuple[Block, int] | None:
        line, gap = self.lines[i], self.gap and not self.para  # a paragraph it interrupts
        if (m := FENCE_LINE.fullmatch(line)) and (fence := fence_opened(m[1], m[2])):
            indent, end, code = len(line) - len(line.lstrip()), i + 1, []
            while end < len(self.lines):
                close = FENCE_LINE.fullmatch(self.lines[end])
                if close and fence_closed_by(fence, close[1], close[2]):
                    break
                code.append(_dedent(self.lines[end], indent))
                end += 1
            # An unclosed fence with nothing in it is most likely a line the splitter had to
            # cut mid-way (```` ```[link](url… ````): show it rather than an empty block.
            if end < len(self.lines) or "".join(code).strip():
                lang = fence.info.split()[0] if fence.info else ""
                return CodeBlock(lang, "\n".join(code), gap), end + 1
        if m := _HEADING.fullmatch(line):
            return Heading(parse_inline(m[1] or ""), gap), i + 1
        if _RULE.fullmatch(line):
            return Rule(gap), i + 1
        if _QUOTE.match(line):
            end, inner = i, []
            while end < len(self.lines) and (q := _QUOTE.match(self.lines[end])):
                inner.append(self.lines[end][q.end() :])
                end += 1
            return Quote(tuple(_BlockParser("\n".join(inner)).parse()), gap), end
        return table_at(self.lines, i, gap)


def _dedent(line: str, indent: int) -> str:
    strip = len(line) - len(line.lstrip(" \t"))
    return line[min(strip, indent) :]


def parse_blocks(md: str) -> list[Block]:
    return _BlockParser(md).parse()
