"""Where the catch-up starts: the newest post time seen per channel, kept durably in
``<home>/mattermost/cursors.json`` (written off the loop, at most once a second and at stop)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("hermes.adapters.mattermost")
FLUSH_EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class Mark:
    """A channel's newest post seen (epoch ms, the server's ``create_at``) and its type."""

    at_ms: int
    channel_type: str


class Cursors:
    """A cursor lost with the last second before a crash is older, never newer: the catch-up
    then takes a post twice, which the inbox drops, rather than miss one."""

    def __init__(self, path: Path, most: int) -> None:
        self.path = path
        self.most = most
        self._marks: OrderedDict[str, Mark] = OrderedDict()
        self._dirty = False
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Read the file (a missing or unreadable one is an empty start)."""
        try:
            raw = await asyncio.to_thread(self.path.read_text)
            data = json.loads(raw)
        except (OSError, ValueError):
            return
        for channel, value in data.items() if isinstance(data, dict) else ():
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], int):
                self._marks[str(channel)] = Mark(value[0], str(value[1]))
        log.info("mattermost.cursors_loaded", channels=len(self._marks))

    def saw(self, channel: str, at_ms: int, channel_type: str) -> None:
        old = self._marks.pop(channel, None)
        newest = max(at_ms, old.at_ms) if old is not None else at_ms
        self._marks[channel] = Mark(newest, channel_type or (old.channel_type if old else ""))
        while len(self._marks) > self.most:
            self._marks.popitem(last=False)
        self._dirty = True

    def rewind(self, channel: str, at_ms: int) -> None:
        """Start the channel's next catch-up at ``at_ms`` at the latest (a post not taken)."""
        old = self._marks.get(channel)
        if old is not None and old.at_ms > at_ms:
            self._marks[channel] = Mark(at_ms, old.channel_type)
            self._dirty = True

    def recent(self, max_age_s: float, now_ms: int | None = None) -> dict[str, Mark]:
        """The channels active within ``max_age_s``: where the catch-up looks."""
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        cutoff = now - int(max_age_s * 1000)
        return {c: m for c, m in self._marks.items() if m.at_ms >= cutoff}

    def newest(self) -> int:
        """The newest post time seen in any channel (0: none yet): where a channel without a
        cursor of its own is caught up from."""
        return max((m.at_ms for m in self._marks.values()), default=0)

    async def flush(self) -> None:
        async with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            data = {c: [m.at_ms, m.channel_type] for c, m in self._marks.items()}
            try:
                await asyncio.to_thread(_write_atomically, self.path, json.dumps(data))
            except OSError as exc:
                self._dirty = True
                log.warning("mattermost.cursors_unwritable", error=str(exc))

    async def keep_flushing(self) -> None:
        """Write the cursors whenever they changed, once a second (until cancelled)."""
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            await self.flush()


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def as_ms(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
