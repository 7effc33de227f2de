"""Split a long Markdown reply into parts that each fit a platform's size limit, preferring
paragraph, then line, then word boundaries, and closing/reopening code fences across parts."""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

Measure = Callable[[str], int]

# A fence delimiter line as CommonMark-ish LLM output writes it. Any indentation is accepted
# because models indent fences inside list items; `markup` shares these helpers so the
# renderer and the splitter always agree on where code is.
FENCE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})([^\n]*)$", re.MULTILINE)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
_NON_SPACE = re.compile(r"\S")
# How many candidates of one kind are examined per part: bounds the work on pathological
# input (thousands of line breaks all inside a fence) at the cost of a slightly earlier cut.
_MAX_TRIES = 200


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the way Telegram counts (an emoji beyond the BMP is 2)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True, slots=True)
class Fence:
    """An open code fence: its delimiter run (```` ``` ````, ``~~~~``) and info string."""

    run: str
    info: str


def fence_opened(run: str, rest: str) -> Fence | None:
    """The fence a delimiter line opens, or None (a backtick fence's info has no backticks)."""
    if run[0] == "`" and "`" in rest:
        return None
    return Fence(run, rest.strip())


def fence_closed_by(fence: Fence, run: str, rest: str) -> bool:
    """Whether a delimiter line closes `fence`: same character, at least as long, no info."""
    return run[0] == fence.run[0] and len(run) >= len(fence.run) and not rest.strip()


@dataclass(frozen=True, slots=True)
class Chunk:
    """One part: ``head + text[start:end] + tail``; head/tail are the fence lines added."""

    head: str
    start: int
    end: int
    tail: str

    def render(self, text: str) -> str:
        return self.head + text[self.start : self.end] + self.tail


def split_message(text: str, limit: int, *, measure: Measure = len) -> list[str]:
    """Split `text` into parts with ``measure(part) <= limit`` each (see `split_chunks`)."""
    return [chunk.render(text) for chunk in split_chunks(text, limit, measure=measure)]


def split_chunks(text: str, limit: int, *, measure: Measure = len) -> list[Chunk]:
    """Plan the split of `text` into parts of at most `limit` units of `measure`.

    Guarantees, for an additive `measure` such as `len` or `utf16_len`:

    * ``measure(chunk.render(text)) <= limit`` for every chunk;
    * no content lost: the bodies ``text[start:end]`` are in order and do not overlap, and
      every character of `text` outside them is whitespace (leading blank lines, trailing
      whitespace, and the spaces/newlines/blank lines at each split point). Indentation at the
      start of a part's first line is kept. A blank `text` gives no parts;
    * every body holds a non-whitespace character; a cut inside a word steps back (a little)
      rather than split a combining sequence, a flag or a ZWJ emoji sequence;
    * fences: when a body ends inside a code fence, `tail` is ``"\\n" + run`` closing it, and
      the next part's `head` reopens it as ``run + info + "\\n"`` (the info string is dropped
      when it does not fit), so every part is fence-balanced on its own.

    A line is never cut so that a piece reads as a fence line, except when nothing else fits
    (a line of backticks longer than a part). A fence line too long to share a part with its
    closing marker is treated as text (only for tiny limits). Raises ValueError if one
    character plus fence markers cannot fit in `limit`.
    """
    return list(iter_chunks(text, limit, measure=measure))


def iter_chunks(text: str, limit: int, *, measure: Measure = len) -> Iterator[Chunk]:
    """`split_chunks`, planned lazily: a caller may stop early and re-plan the rest."""
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    return _Planner(text, limit, measure).plan()


class _Planner:
    def __init__(self, text: str, limit: int, measure: Measure) -> None:
        self.text, self.limit, self.measure = text, limit, measure
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.before: list[Fence | None] = []
        self.after: list[Fence | None] = []
        self.heads_cache: dict[Fence, tuple[str, ...]] = {}
        self._scan_fences()
        self.opener_ends = {e for e, b in zip(self.ends, self.before, strict=True) if b is None}
        self.closer_starts = {
            s for s, b in zip(self.starts, self.before, strict=True) if b is not None
        }

    def _scan_fences(self) -> None:
        state: Fence | None = None
        fits: dict[str, bool] = {}  # answers are full of identical fence lines
        for m in FENCE_LINE.finditer(self.text):
            line, run, rest = m.group(), m.group(1), m.group(2)
            if line not in fits:
                fits[line] = self.measure(line) + self.measure("\n" + run) <= self.limit
            if not fits[line]:
                continue  # too long to ever share a part with its closer: treat as text
            if state is None:
                new = fence_opened(run, rest)
            else:
                new = None if fence_closed_by(state, run, rest) else state
            if new is state:
                continue
            self.starts.append(m.start())
            self.ends.append(m.start() + len(line.rstrip()))
            self.before.append(state)
            self.after.append(new)
            state = new

    def heads(self, fence: Fence | None) -> tuple[str, ...]:
        """Reopening markers to try for a part starting inside `fence`, best first."""
        if fence is None:
            return ("",)
        if fence not in self.heads_cache:
            # `~~~~ ~` must not come back as `~~~~~`, a longer fence with another closer.
            gap = " " if fence.info.startswith(fence.run[0]) else ""
            full, bare = f"{fence.run}{gap}{fence.info}\n", fence.run + "\n"
            room = self.measure(full) + self.measure(self.tail(fence)) + 2 <= self.limit
            self.heads_cache[fence] = (full, bare) if room and fence.info else (bare,)
        return self.heads_cache[fence]

    @staticmethod
    def tail(fence: Fence | None) -> str:
        return "" if fence is None else "\n" + fence.run

    def state_at(self, pos: int) -> tuple[Fence | None, bool]:
        """The fence open for a body ending at `pos`, and whether `pos` is inside a delimiter."""
        i = bisect_right(self.starts, pos) - 1
        if i < 0:
            return None, False
        if pos >= self.ends[i]:
            return self.after[i], False
        return self.before[i], pos > self.starts[i]

    def next_start(self, pos: int) -> int:
        """Where the next body starts after a cut at `pos`: skip whitespace, keep indentation."""
        m = _NON_SPACE.search(self.text, pos)
        if m is None:
            return len(self.text)
        nl = self.text.rfind("\n", pos, m.start())
        if nl != -1:
            return nl + 1
        if pos == 0 or self.text[pos - 1] == "\n":
            return pos
        return m.start()

    def plan(self) -> Iterator[Chunk]:
        text = self.text
        start = self.next_start(0)
        while start < len(text):
            for head in self.heads(self.state_at(start)[0]):
                last = self.max_end(start, head)
                if last > start:
                    break
            else:
                raise ValueError(f"limit {self.limit} cannot hold a character with fence lines")
            end = self.choose(start, head, last)
            if end is None or end <= start:  # only indentation fits: it is whitespace, drop it
                start = self.next_start(start + 1)
                continue
            yield Chunk(head, start, end, self.tail(self.state_at(end)[0]))
            start = self.next_start(end)

    def fits(self, start: int, head: str, end: int, whole_lines: bool = False) -> bool:
        i = bisect_right(self.starts, end) - 1
        if whole_lines and i >= 0 and self.starts[i] < end < self.ends[i]:
            # For the search, measure a cut inside a fence line as if the line were whole, or
            # the closer's arrival (the tail no longer needed) makes the size dip and misfire.
            end = self.ends[i]
        body = self.text[start:end]
        return self.measure(head + body + self.tail(self.state_at(end)[0])) <= self.limit

    def max_end(self, start: int, head: str) -> int:
        """The largest end whose part fits, or `start` if none does (gallop, then bisect;
        assumes a monotone measure)."""
        n, good, step = len(self.text), start, max(1, self.limit)
        bad = min(n, start + step)
        while self.fits(start, head, bad, whole_lines=True):
            good = bad
            if bad == n:
                return n
            step *= 2
            bad = min(n, start + step)
        while bad - good > 1:
            mid = (good + bad) // 2
            if self.fits(start, head, mid, whole_lines=True):
                good = mid
            else:
                bad = mid
        return good

    def choose(self, start: int, head: str, last: int) -> int | None:
        """The body end for the part starting at `start`, by preference of break kind."""
        if last == len(self.text):
            return self.rstrip(start, last)
        low = start + (last - start) // 2
        paragraphs = [m.start() for m in _PARAGRAPH_BREAK.finditer(self.text, low, last + 1)]
        kinds: tuple[tuple[Iterator[int], bool | None], ...] = (
            (reversed(paragraphs), False),
            (self.lines(low, last), False),
            (reversed(paragraphs), True),
            (self.lines(low, last), True),
            (self.spaces(low, last), None),
        )
        for candidates, inside in kinds:
            for _, cut in zip(range(_MAX_TRIES), candidates, strict=False):
                end = self.accept(start, head, cut, inside)
                if end is not None:
                    return end
        return self.hard_cut(start, head, last)

    def rstrip(self, start: int, end: int) -> int:
        while end > start and self.text[end - 1].isspace():
            end -= 1
        return end

    def accept(self, start: int, head: str, cut: int, inside: bool | None) -> int | None:
        """The body end for a cut at `cut` if it is a good split, else None."""
        end = self.rstrip(start, cut)
        if end <= start:
            return None
        fence, in_delimiter = self.state_at(end)
        if in_delimiter or (inside is not None and (fence is not None) != inside):
            return None
        following = self.next_start(end)
        # A part must not end right after an opener or leave the next part only a closer:
        # both would show an empty code block.
        if fence is not None and (end in self.opener_ends or following in self.closer_starts):
            return None
        if self.fake_delimiter(start, end, following, fence):
            return None
        return end if self.fits(start, head, end) else None

    def fake_delimiter(self, start: int, end: int, following: int, fence: Fence | None) -> bool:
        """Whether cutting a line in two would leave a piece that reads as a fence line
        (``see ```python`` cut before the backticks opens a fence in the next part)."""
        text = self.text
        line_start = max(start, text.rfind("\n", 0, end) + 1)  # this part's piece of it
        line_end = text.find("\n", end)
        line_end = len(text) if line_end == -1 else line_end
        if text[line_start:line_end].rstrip() != text[line_start:end] and _delimiter(
            text[line_start:end], fence
        ):
            return True
        if following >= len(text) or text[following - 1] == "\n":
            return False
        line_end = text.find("\n", following)
        return _delimiter(text[following : len(text) if line_end == -1 else line_end], fence)

    def hard_cut(self, start: int, head: str, last: int) -> int | None:
        cut = last
        for _ in range(16):  # step back out of a combining or ZWJ sequence, within reason
            if cut - 1 <= start or not _joined(self.text, cut):
                break
            cut -= 1
        line_start = self.text.rfind("\n", 0, cut) + 1
        # A few characters back un-makes a piece that reads as a fence line.
        for candidate in (*range(cut, cut - 8, -1), line_start, last):
            if candidate > start and (end := self.accept(start, head, candidate, None)):
                return end
        # Nothing clean fits (a line of thousands of backticks): cut anyway, losing nothing.
        end = self.rstrip(start, last)
        while end > start and not self.fits(start, head, end):
            end -= 1
        return end if end > start else None

    def lines(self, low: int, high: int) -> Iterator[int]:
        pos = high + 1
        while (pos := self.text.rfind("\n", low, pos)) != -1:
            yield pos

    def spaces(self, low: int, high: int) -> Iterator[int]:
        pos = high + 1
        while (pos := self.text.rfind(" ", low, pos)) != -1:
            yield pos


def _delimiter(line: str, fence: Fence | None) -> bool:
    """Whether `line` would open a fence (when none is open) or close `fence`."""
    m = FENCE_LINE.fullmatch(line)
    if m is None:
        return False
    if fence is None:
        return fence_opened(m[1], m[2]) is not None
    return fence_closed_by(fence, m[1], m[2])


def _joined(text: str, pos: int) -> bool:
    """Whether cutting before text[pos] would split a user-perceived character."""
    prev, char = text[pos - 1], text[pos]
    if prev == "\u200d" or (prev == "\r" and char == "\n"):
        return True
    code = ord(char)
    return (
        char == "\u200d"
        or unicodedata.category(char) in ("Mn", "Me", "Mc")
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0x1F3FB <= code <= 0x1F3FF  # skin tones
        or 0xE0020 <= code <= 0xE007F  # emoji tag sequences (subdivision flags)
        or (_regional(char) and _flag_half(text, pos))
    )


def _regional(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def _flag_half(text: str, pos: int) -> bool:
    """Whether an odd run of regional indicators precedes `pos` (a flag is a pair of them)."""
    run = 0
    while run < pos and _regional(text[pos - 1 - run]):
        run += 1
    return run % 2 == 1
