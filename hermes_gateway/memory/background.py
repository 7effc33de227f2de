"""Auto-retain's queue: completed turns wait here and are retained in batches (one embeddings
request, one transaction) once the gateway is quiet, so the archive's writes and embedding calls
do not compete with the replies being worked on.

A batch goes when no run has been active for `quiet_s`, when `max_batch` turns wait, or when the
oldest has waited `max_wait_s`. The queue is in memory: turns still waiting when the gateway
stops get `flush_s` to be written, the rest are counted in a log line (their messages stay in
the store's history).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from agent_core import ModelError
from hermes_gateway.errors import StoreError

log = structlog.get_logger("hermes.memory")


@dataclass(frozen=True, slots=True)
class Turn:
    bank: str
    content: str
    session_key: str
    message_id: str


class RetainQueue:
    """Owned by `MemoryService`; `start` it on the loop."""

    def __init__(
        self,
        write: Callable[[list[Turn]], Awaitable[None]],
        busy: Callable[[], bool],
        *,
        quiet_s: float = 0.5,
        max_wait_s: float = 30.0,
        max_batch: int = 256,
        max_queue: int = 1000,
    ) -> None:
        self._write = write  # async: retains a batch
        self.busy = busy
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s
        self.max_batch = max_batch
        self.max_queue = max_queue
        self._items: list[Turn] = []
        self._saving: list[Turn] = []  # the batch being written (put back if cancelled)
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.written = 0

    def __len__(self) -> int:
        return len(self._items)

    def put(self, turn: Turn) -> None:
        """Never waits; past `max_queue` the turn is skipped (logged)."""
        if len(self._items) >= self.max_queue:
            log.warning("memory.auto_retain_skipped", reason="queue full", bank=turn.bank)
            return
        self._items.append(turn)
        self._ready.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="auto-retain")

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            await self._until_quiet()
            batch, self._items = self._items[: self.max_batch], self._items[self.max_batch :]
            if not self._items:
                self._ready.clear()
            self._saving = batch
            await self._save(batch)
            self._saving = []

    async def _until_quiet(self) -> None:
        started = time.monotonic()
        quiet_since: float | None = None
        while len(self._items) < self.max_batch and time.monotonic() - started < self.max_wait_s:
            now = time.monotonic()
            if self.busy():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= self.quiet_s:
                return
            await asyncio.sleep(0.05)

    async def _save(self, batch: list[Turn]) -> None:
        try:
            await self._write(batch)
            self.written += len(batch)
        except (StoreError, ModelError) as exc:
            log.warning("memory.auto_retain_failed", error=str(exc), turns=len(batch))

    async def close(self, flush_s: float) -> None:
        """At shutdown: write what waits, for at most ``flush_s``; then stop."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        left, self._items, self._saving = self._saving + self._items, [], []
        if left:
            try:
                await asyncio.wait_for(self._save(left), flush_s)
            except TimeoutError:
                log.warning("memory.auto_retain_dropped", turns=len(left))
