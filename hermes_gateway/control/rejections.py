"""Refused requests, logged as samples: the first of a kind gets its own line, the rest are
counted and written as one `control.rejected_summary` line per interval, so a flood of
strangers' requests cannot rotate the gateway's own history out of the log."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import structlog

log = structlog.get_logger("hermes.control")
FIRST_LINES_PER_INTERVAL = 20  # a flood from many addresses gets no more own lines than this
_KINDS_KEPT = 1024  # kinds remembered as "seen" (oldest forgotten first)
_KINDS_LISTED = 20  # kinds named in a summary line; the rest are summed in `other`
_KINDS_COUNTED = 4096  # kinds counted apart in one interval; past it they share one count
_ANY: tuple[str, str, str] = ("*", "*", "*")

Kind = tuple[str, str, str]  # (code, source address, route)


class Rejections:
    """Counts refused requests per (code, source, route); `note` is called on the loop, and
    `flush` by its owner once per interval (the control server's task)."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._seen: OrderedDict[Kind, None] = OrderedDict()
        self._counts: dict[Kind, int] = {}
        self._since = clock()
        self._first_lines = 0

    def note(self, code: str, status: int, source: str, route: str, reason: str) -> None:
        """One refused request: its own INFO line if its kind is new, else a count."""
        kind = (code, source, route)
        if kind in self._seen:
            self._seen.move_to_end(kind)
        elif self._first_lines < FIRST_LINES_PER_INTERVAL:
            self._first_lines += 1
            self._remember(kind)
            log.info(
                "control.rejected",
                status=status,
                code=code,
                source=source,
                path=route,
                reason=reason[:200],
            )
            return
        if kind not in self._counts and len(self._counts) >= _KINDS_COUNTED:
            kind = _ANY
        self._counts[kind] = self._counts.get(kind, 0) + 1

    def flush(self, now: float | None = None) -> None:
        """Write the counts since the last flush as one line (none when nothing was counted)."""
        now = self._clock() if now is None else now
        counts, self._counts = self._counts, {}
        elapsed, self._since, self._first_lines = now - self._since, now, 0
        if not counts:
            return
        ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
        kinds = [
            {"code": code, "source": source, "path": route, "count": n}
            for (code, source, route), n in ranked[:_KINDS_LISTED]
        ]
        for kind, _ in ranked[:_KINDS_LISTED]:
            self._remember(kind)
        log.info(
            "control.rejected_summary",
            total=sum(counts.values()),
            seconds=round(elapsed, 1),
            kinds=kinds,
            other=sum(n for _, n in ranked[_KINDS_LISTED:]),
        )

    def _remember(self, kind: Kind) -> None:
        self._seen[kind] = None
        self._seen.move_to_end(kind)
        while len(self._seen) > _KINDS_KEPT:
            self._seen.popitem(last=False)
