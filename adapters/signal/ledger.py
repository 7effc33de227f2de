"""What the Signal adapter keeps on disk across a crash (``<home>/signal/<account>.json``):
the event stream's cursor, the timestamps of what this account sent (a reply part with its
idempotency key), and the evidence of sends the stream showed (delivery receipts, sent
transcripts), so that a reply part a crash left in doubt can be asked after.

Signal has no message ids but (author, timestamp), and signal-cli keeps no history of sent
messages to look a part up in. A part in doubt went out if (1) its key is recorded with its
timestamp here (the crash came after the daemon's answer, before the gateway's record), or (2)
its chat's recipient acknowledged a message this account sent after the part's intent whose
timestamp is none of the sends recorded here (the crash came before the daemon answered), or
a sent transcript with the part's text says so."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger("hermes.adapters.signal")
KEEP = 512  # sends and evidence remembered: minutes of a busy account


@dataclass(frozen=True, slots=True)
class Sent:
    """One message this account sent through the daemon: its chat, timestamp and key."""

    chat: str
    ts: int
    key: str = ""


@dataclass(frozen=True, slots=True)
class Seen:
    """Evidence of a message of this account on the stream: a receipt from ``sender`` (a user)
    for ``ts``, or a sent transcript to ``chat`` with its text's digest."""

    sender: str
    ts: int
    digest: str = ""  # a transcript's text digest; "" for a receipt


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


class Ledger:
    """The adapter's crash-surviving notes, written whole (temp file + rename) off the loop,
    one write at a time; a write covers every change made before it started."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cursor = ""
        self.sent: deque[Sent] = deque(maxlen=KEEP)
        self.seen: deque[Seen] = deque(maxlen=KEEP)
        self.changed = asyncio.Event()  # set at each new piece of evidence
        self._lock = asyncio.Lock()
        self._version = 0
        self._written = 0

    async def load(self) -> None:
        raw = await asyncio.to_thread(_read, self.path)
        if raw is None:
            return
        try:
            sent = [Sent(str(i[0]), int(i[1]), str(i[2])) for i in raw.get("sent") or []]
            seen = [Seen(str(i[0]), int(i[1]), str(i[2])) for i in raw.get("seen") or []]
        except (TypeError, ValueError, LookupError) as exc:
            log.warning("signal.ledger_unreadable", path=str(self.path), error=str(exc))
            return
        self.cursor = str(raw.get("cursor") or "")
        self.sent.extend(sent)
        self.seen.extend(seen)

    def note_sent(self, sent: Sent) -> None:
        self.sent.append(sent)
        self._version += 1

    def note_seen(self, seen: Seen) -> None:
        self.seen.append(seen)
        self._version += 1
        self.changed.set()

    def advance(self, cursor: str) -> None:
        if cursor and cursor != self.cursor:
            self.cursor = cursor
            self._version += 1

    async def save(self) -> None:
        """Write what changed since the last write (nothing when nothing did)."""
        async with self._lock:
            version = self._version
            if version == self._written:
                return
            data = {
                "cursor": self.cursor,
                "sent": [[s.chat, s.ts, s.key] for s in self.sent],
                "seen": [[s.sender, s.ts, s.digest] for s in self.seen],
            }
            await asyncio.to_thread(_write, self.path, data)
            self._written = version

    # -- the sent-check's questions -----------------------------------------------------------

    def by_key(self, key: str) -> Sent | None:
        return next((s for s in self.sent if key and s.key == key), None)

    def evidence(self, senders: frozenset[str], after: int, text: str) -> Seen | None:
        """A receipt from one of ``senders`` (a DM's user, a group's members) for a message
        sent at or after ``after`` that is none of the recorded sends nor a transcript of
        another text, or a transcript of ``text`` itself."""
        ours = {s.ts for s in self.sent}
        want = digest(text)
        others = {s.ts for s in self.seen if s.digest and s.digest != want}
        for seen in self.seen:
            if seen.ts < after:
                continue
            if seen.digest:
                if seen.digest == want and seen.sender in senders:
                    return seen
            elif seen.sender in senders and seen.ts not in ours and seen.ts not in others:
                return seen
        return None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # a torn or foreign file: start afresh, say so
        log.warning("signal.ledger_unreadable", path=str(path), error=str(exc))
        return None
    return raw if isinstance(raw, dict) else None


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    os.replace(tmp, path)
