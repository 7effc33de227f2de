"""What the Matrix adapter keeps between runs, in the gateway's home: the /sync ``since``
token (moved on only once every message of a batch is in the inbox, so a restart neither
misses a message nor, thanks to the inbox's own duplicate check, answers one twice) and the
rooms already told that the bot cannot read encrypted messages. One small JSON file per bot
user, replaced atomically; read and written on worker threads."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import structlog

log = structlog.get_logger("hermes.adapters.matrix")


@dataclass(frozen=True, slots=True)
class Kept:
    since: str = ""
    told_encrypted: frozenset[str] = field(default_factory=frozenset)


class SyncState:
    """``<home>/matrix/<homeserver and user digest>.json``."""

    def __init__(self, home: Path, homeserver: str, user_id: str) -> None:
        digest = hashlib.sha256(f"{homeserver.rstrip('/')}\x00{user_id}".encode()).hexdigest()
        self.path = home / "matrix" / f"sync-{digest[:16]}.json"
        self.kept = Kept()

    async def load(self) -> Kept:
        self.kept = await asyncio.to_thread(self._read)
        return self.kept

    async def save(self, since: str | None = None, told: str | None = None) -> None:
        kept = self.kept
        told_encrypted = kept.told_encrypted | {told} if told else kept.told_encrypted
        new = Kept(since if since is not None else kept.since, frozenset(told_encrypted))
        if new == kept:
            return
        await asyncio.to_thread(self._write, new)
        self.kept = new

    def _read(self) -> Kept:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return Kept()
        except (OSError, ValueError) as exc:  # a torn or foreign file: start afresh, say so
            log.error("matrix.state_unreadable", path=str(self.path), error=str(exc))
            return Kept()
        since = data.get("since") if isinstance(data, dict) else None
        told = data.get("told_encrypted") if isinstance(data, dict) else None
        rooms = frozenset(r for r in told if isinstance(r, str)) if isinstance(told, list) else ()
        return Kept(since if isinstance(since, str) else "", frozenset(rooms))

    def _write(self, kept: Kept) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = {"since": kept.since, "told_encrypted": sorted(kept.told_encrypted)}
        temp = self.path.with_suffix(".tmp")
        with temp.open("w") as out:
            json.dump(body, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.path)
