"""The Logs page's live tail: the gateway's JSON log read the way `hermes gateway logs -f`
reads it (`hermes_gateway.logs.tail`), on a thread of its own that runs only while a page
watches."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from hermes_gateway.dashboard.streams import KEEPALIVE_S, pause
from hermes_gateway.logs import tail

BACKLOG_LINES = 200
BACKLOG_BYTES = 512 * 1024
QUEUE_MAX = 2000  # lines waiting for the page; beyond it lines are counted, not kept
BATCH = 200
VALUE_CHARS = 2000


def log_filter(query: dict[str, str]) -> tail.LogFilter:
    level = query.get("level", "")
    return tail.LogFilter(
        level=tail.LEVELS.get(level, 0),
        session=query.get("session") or None,
        platform=query.get("platform") or None,
    )


def _clip(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v[:VALUE_CHARS] if isinstance(v, str) else v
        for k, v in entry.items()
        if isinstance(v, str | int | float | bool) or v is None
    }


def backlog(path: Path, flt: tail.LogFilter) -> list[dict[str, Any]]:
    """The last matching lines of the current log file (blocking: run it on a thread)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - BACKLOG_BYTES))
            raw = fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    lines = raw.splitlines()[1:] if size > BACKLOG_BYTES else raw.splitlines()
    kept: deque[dict[str, Any]] = deque(maxlen=BACKLOG_LINES)
    for line in lines:
        if line.strip() and flt.accepts(entry := tail.parse_line(line)):
            kept.append(_clip(entry))
    return list(kept)


class Follower:
    """`tail.follow` on a daemon thread, handing matching lines to the loop."""

    def __init__(self, path: Path, flt: tail.LogFilter, loop: asyncio.AbstractEventLoop) -> None:
        self.path, self.flt, self.loop = path, flt, loop
        self.lines: deque[dict[str, Any]] = deque()
        self.lost = 0
        self.ready = asyncio.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hermes-dash-logs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set() and not self.path.exists():
            time.sleep(0.5)
        if self._stop.is_set():
            return
        for line in tail.follow(self.path, poll=0.25, stop=self._stop.is_set):
            if line.strip() and self.flt.accepts(entry := tail.parse_line(line)):
                self.loop.call_soon_threadsafe(self._take, _clip(entry))

    def _take(self, entry: dict[str, Any]) -> None:
        if len(self.lines) >= QUEUE_MAX:
            self.lost += 1
        else:
            self.lines.append(entry)
        self.ready.set()


def producer(
    path: Path, flt: tail.LogFilter, stopping: asyncio.Event
) -> Callable[[], AsyncGenerator[tuple[str, Any], None]]:
    async def produce() -> AsyncGenerator[tuple[str, Any], None]:
        follower = Follower(path, flt, asyncio.get_running_loop())
        follower.start()  # before the backlog is read: a line written meanwhile is not missed
        try:
            yield "logs", {"lines": await asyncio.to_thread(backlog, path, flt), "lost": 0}
            while not stopping.is_set():
                await pause(KEEPALIVE_S, follower.ready, stopping)
                follower.ready.clear()
                if not follower.lines:
                    yield "", None
                    continue
                batch = [follower.lines.popleft() for _ in range(min(BATCH, len(follower.lines)))]
                if follower.lines:
                    follower.ready.set()
                yield "logs", {"lines": batch, "lost": follower.lost}
                await asyncio.sleep(0.2)  # a burst goes out in batches, not a line at a time
        finally:
            follower.stop()

    return produce
