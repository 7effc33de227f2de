"""What the WhatsApp adapter must remember across a restart, in a small SQLite file of its own
under ``<home>/whatsapp/``: the keys of the reply parts Meta said it took (status webhooks carry
them back in ``biz_opaque_callback_data``), and when each user last wrote (the 24-hour window).
Every call runs on a worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS sent_keys (key TEXT PRIMARY KEY, wamid TEXT, at REAL)",
    "CREATE TABLE IF NOT EXISTS heard (chat TEXT PRIMARY KEY, at REAL)",
)


class Ledger:
    def __init__(self, path: Path, keep_s: float) -> None:
        self.path = path
        self.keep_s = keep_s
        self._lock = asyncio.Lock()  # one writer at a time; SQLite would make others wait

    async def open(self) -> None:
        """Create the file (and forget keys older than ``keep_s``: Meta stops redelivering a
        webhook after 7 days, so nothing older can be in doubt)."""
        await self._run(self._open)

    async def sent(self, entries: Iterable[tuple[str, str]]) -> None:
        """Keep the (key, wamid) of parts Meta took, durably, before the webhook is answered."""
        rows = [(key, wamid, time.time()) for key, wamid in entries if key]
        if rows:
            await self._run(self._write, "INSERT OR IGNORE INTO sent_keys VALUES (?, ?, ?)", rows)

    async def was_sent(self, key: str) -> bool:
        found = await self._run(self._read, "SELECT 1 FROM sent_keys WHERE key = ?", (key,))
        return found is not None

    async def heard_from(self, chat: str, at: float) -> None:
        """``chat`` wrote at ``at`` (the message's own timestamp): its window is open 24 h."""
        sql = "INSERT INTO heard VALUES (?, ?) ON CONFLICT(chat) DO UPDATE SET at = MAX(at, ?)"
        await self._run(self._write, sql, [(chat, at, at)])

    async def last_heard(self, chat: str) -> float | None:
        found = await self._run(self._read, "SELECT at FROM heard WHERE chat = ?", (chat,))
        return float(str(found[0])) if found is not None else None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._lock:
            return await asyncio.to_thread(fn, *args)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            for statement in SCHEMA:
                db.execute(statement)
            db.execute("DELETE FROM sent_keys WHERE at < ?", (time.time() - self.keep_s,))
        db.close()

    def _write(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        with self._connect() as db:
            db.executemany(sql, rows)
        db.close()

    def _read(self, sql: str, args: tuple[object, ...]) -> tuple[object, ...] | None:
        db = self._connect()
        try:
            row = db.execute(sql, args).fetchone()
        finally:
            db.close()
        return tuple(row) if row is not None else None
