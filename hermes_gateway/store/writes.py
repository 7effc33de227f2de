"""Whether the store can write: a database that answers but cannot store (disk full, read-only,
its file deleted) closes intake until a probe with backoff finds that it can write again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("hermes.store")
WriteProbe = Callable[[], Awaitable[None]]

# SQLite's extended codes start with the primary one's name (SQLITE_READONLY_DBMOVED, ...)
_SQLITE = (
    ("SQLITE_FULL", "disk full"),
    ("SQLITE_READONLY", "read-only"),
    ("SQLITE_IOERR", "I/O error"),
    ("SQLITE_CANTOPEN", "cannot open the database file"),
)
_POSTGRES = {"53100": "disk full", "25006": "read-only", "53200": "out of memory"}
_TEXT = (
    ("database or disk is full", "disk full"),
    ("readonly database", "read-only"),
    ("read-only", "read-only"),
    ("disk i/o error", "I/O error"),
    ("unable to open database file", "cannot open the database file"),
)


class DatabaseFileGone(OSError):
    """The database file was deleted or replaced under the open connections: what they write
    would go to a file no later start reads."""


def cannot_write(exc: BaseException) -> str | None:
    """Why ``exc`` means the database cannot store anything now ("disk full", "read-only", ...),
    or None for a failure of one statement or of reaching the server."""
    orig = getattr(exc, "orig", None) or exc
    if isinstance(orig, DatabaseFileGone):
        return str(orig)
    name = str(getattr(orig, "sqlite_errorname", "") or "")
    for prefix, reason in _SQLITE:
        if name.startswith(prefix):
            return reason
    if state := _POSTGRES.get(str(getattr(orig, "sqlstate", "") or "")):
        return state
    text = str(orig).lower()
    return next((reason for words, reason in _TEXT if words in text), None)


class WriteGate:
    """Open while the store can write. A write failing for lack of space, a read-only
    database or a vanished file closes it: intake that a platform redelivers leaves new
    updates there, and a probe with growing pauses (or any write that succeeds) reopens it."""

    backoff_first_s = 0.5
    backoff_max_s = 5.0
    probe_timeout_s = 10.0
    steady_after_s = 30.0  # open this long: the next outage starts probing from the first pause

    def __init__(self, probe: WriteProbe | None = None) -> None:
        self.probe = probe  # a real write; called only once the database is open
        self.open = asyncio.Event()
        self.open.set()
        self.closed_since: float | None = None
        self.reason = ""
        self.error = ""
        self.file_gone = False
        self._prober: asyncio.Task[None] | None = None
        self._pause = self.backoff_first_s
        self._reopened_at = -self.steady_after_s

    @property
    def problem(self) -> str | None:
        if self.closed_since is None:
            return None
        seconds = time.monotonic() - self.closed_since
        return f"{self.reason} for {seconds:.0f} s; new messages wait ({self.error})"

    def close(self, reason: str, error: str, *, file_gone: bool = False) -> None:
        """The store cannot write (``reason``); idempotent while it stays so."""
        self.file_gone = self.file_gone or file_gone
        if self.closed_since is None:
            self.closed_since = time.monotonic()
            self.open.clear()
            log.error(
                "store.cannot_write",
                reason=reason,
                error=error,
                hint="new messages are left with their platform until a write succeeds",
            )
        elif reason != self.reason:
            log.error("store.cannot_write", reason=reason, error=error)
        self.reason, self.error = reason, error
        if self.probe is not None and (self._prober is None or self._prober.done()):
            self._prober = asyncio.create_task(self._probe_until_writable(), name="write-probe")

    async def _probe_until_writable(self) -> None:
        assert self.probe is not None
        # a store that flaps (a probe write fits where a message does not) keeps its pause
        flapping = time.monotonic() - self._reopened_at < self.steady_after_s
        pause = self._pause if flapping else self.backoff_first_s
        while True:
            await asyncio.sleep(pause)
            pause = self._pause = min(self.backoff_max_s, pause * 2)
            try:
                async with asyncio.timeout(self.probe_timeout_s):
                    await self.probe()
            except Exception as exc:  # whatever the driver raises, the answer is "not yet"
                reason = cannot_write(exc) or self.reason
                gone = isinstance(exc, DatabaseFileGone)
                self.close(reason, f"{type(exc).__name__}: {str(exc)[:160]}", file_gone=gone)
                continue
            self.reopen("the write probe succeeded")
            return

    def reopen(self, how: str) -> None:
        """The store wrote again (not after a lost file: writes to it succeed, uselessly)."""
        if self.closed_since is None or (self.file_gone and how != "the write probe succeeded"):
            return
        seconds = time.monotonic() - self.closed_since
        self.closed_since, self.file_gone = None, False
        self._reopened_at = time.monotonic()
        self.open.set()
        log.warning("store.writable_again", reason=self.reason, how=how, down_s=round(seconds, 1))
        if self._prober is not None and self._prober is not asyncio.current_task():
            self._prober.cancel()

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            await asyncio.gather(self._prober, return_exceptions=True)
            self._prober = None
