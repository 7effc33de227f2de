"""The process's resident memory, as the control server's admission sees it, and giving freed
heap back to the OS after large request bodies (glibc keeps freed pages in its arenas, so a
burst of bodies would leave RSS at its peak for good)."""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("hermes.control")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_STATM = "/proc/self/statm"
TRIM_AFTER_BYTES = 4 * 1024 * 1024  # body bytes freed since the last trim that warrant one
TRIM_DELAY_S = 0.5  # a burst is trimmed once, after it
TRIM_OVER_CEILING_EVERY_S = 5.0  # over the ceiling, freed heap may be what holds it there


def rss_bytes() -> int | None:
    """Resident set size now (Linux: /proc/self/statm, a read of kernel memory that does not
    block), or None where that is not available."""
    try:
        with open(_STATM, "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    # the process's own symbols, libc's among them: `ctypes.util.find_library` would run
    # `ldconfig -p` in a child process, on the loop, while the gateway is built
    try:
        libc = ctypes.CDLL(None)
        trim: Callable[[int], int] = libc.malloc_trim  # glibc only
    except (OSError, AttributeError, TypeError):
        return None
    return trim


class MemoryGauge:
    """RSS read at most every ``every_s`` (admission asks once per request), and a trim of the
    C heap off the loop once enough body bytes were freed."""

    def __init__(self, ceiling: int, every_s: float = 0.05) -> None:
        self.ceiling = ceiling  # bytes; 0: no ceiling
        self._every_s = every_s
        self._read_at = -1.0
        self._rss: int | None = None
        self._freed = 0
        self._trim = _malloc_trim()
        self._pending: asyncio.Task[None] | None = None
        self._trimmed_at = -TRIM_OVER_CEILING_EVERY_S

    def rss(self) -> int | None:
        now = time.monotonic()
        if now - self._read_at >= self._every_s:
            self._rss, self._read_at = rss_bytes(), now
        return self._rss

    def over(self) -> bool:
        """True while the process is over its ceiling (never without one, or where RSS is not
        known). Over it, a trim is tried now and then: part of it may be freed heap."""
        if not self.ceiling:
            return False
        rss = self.rss()
        if rss is None or rss <= self.ceiling:
            return False
        if time.monotonic() - self._trimmed_at >= TRIM_OVER_CEILING_EVERY_S:
            self._schedule_trim()
        return True

    def freed(self, size: int) -> None:
        """A request that carried ``size`` bytes of body is done with them (its handler has
        returned): trim after the burst, when enough has been let go."""
        self._freed += size
        if self._freed >= TRIM_AFTER_BYTES:
            self._schedule_trim()

    def _schedule_trim(self) -> None:
        if self._trim is not None and self._pending is None:
            self._pending = asyncio.get_running_loop().create_task(self._trim_later())

    async def _trim_later(self) -> None:
        try:
            await asyncio.sleep(TRIM_DELAY_S)
            self._freed = 0
            self._trimmed_at = time.monotonic()
            assert self._trim is not None
            await asyncio.to_thread(self._trim, 0)  # ctypes lets go of the GIL meanwhile
            self._read_at = -1.0  # the next admission reads RSS afresh
        finally:
            self._pending = None

    async def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            await asyncio.gather(self._pending, return_exceptions=True)
