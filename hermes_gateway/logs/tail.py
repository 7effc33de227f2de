"""`hermes gateway logs`: read the JSON log, filter it, render it readably, follow it.

Reads `<home>/logs/gateway.log` (with its rotated siblings for `--since`), or journald when
the file is absent and journalctl exists. Following survives rotation (the file is reopened
when its inode changes or it shrinks).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_COLORS = {
    "debug": "\033[2m",
    "info": "\033[32m",
    "warning": "\033[33m",
    "error": "\033[31m",
    "critical": "\033[1;31m",
}
_SINCE = re.compile(r"^(\d+)([smhd])$")
_FIXED = ("timestamp", "level", "event", "logger")


@dataclass(frozen=True, slots=True)
class LogFilter:
    since: datetime | None = None
    level: int = 0
    session: str | None = None
    platform: str | None = None

    def accepts(self, entry: dict[str, Any]) -> bool:
        if LEVELS.get(str(entry.get("level", "info")), 20) < self.level:
            return False
        if self.session and self.session not in str(entry.get("session_key", "")):
            return False
        if self.platform and entry.get("platform") != self.platform:
            return False
        if self.since is not None:
            stamp = _parse_time(entry.get("timestamp"))
            if stamp is not None and stamp < self.since:
                return False
        return True


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``10m``, ``2h``, ``1d``, ``30s`` or an ISO timestamp."""
    match = _SINCE.match(text.strip())
    now = now or datetime.now(UTC)
    if match:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return now - timedelta(**{unit: int(match.group(1))})
    stamp = _parse_time(text)
    if stamp is None:
        raise ValueError(f"--since: expected 10m, 2h, 1d or an ISO time, got {text!r}")
    return stamp


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def parse_line(line: str) -> dict[str, Any]:
    line = line.strip()
    try:
        entry = json.loads(line)
    except ValueError:
        return {"event": line, "level": "info"}
    return entry if isinstance(entry, dict) else {"event": line, "level": "info"}


def render(entry: dict[str, Any], color: bool) -> str:
    stamp = str(entry.get("timestamp", ""))[:23].replace("T", " ")
    level = str(entry.get("level", "info"))
    extras = " ".join(
        f"{k}={v}" for k, v in entry.items() if k not in _FIXED and k not in ("stack", "exception")
    )
    event = entry.get("event", "")
    text = f"{stamp} {level:<8} {event}"
    if color:
        tint = _COLORS.get(level, "")
        text = f"\033[2m{stamp}\033[0m {tint}{level:<8}\033[0m \033[1m{event}\033[0m"
    out = f"{text}  {extras}".rstrip()
    for key in ("exception", "stack"):
        if entry.get(key):
            out += "\n" + str(entry[key]).rstrip()
    return out


def log_files(path: Path) -> list[Path]:
    """The log and its rotated siblings, oldest first (gateway.log.5 ... gateway.log)."""
    rotated = sorted(
        (p for p in path.parent.glob(path.name + ".*") if p.suffix.lstrip(".").isdigit()),
        key=lambda p: int(p.suffix.lstrip(".")),
        reverse=True,
    )
    return [*rotated, path] if path.exists() else rotated


def read_lines(path: Path, include_rotated: bool) -> Iterator[str]:
    for file in log_files(path) if include_rotated else [path]:
        with file.open(encoding="utf-8", errors="replace") as fh:
            yield from fh


def follow(path: Path, poll: float = 0.2, stop: Any = None) -> Iterator[str]:
    """Yield lines appended to ``path`` from now on, reopening it after rotation."""
    fh = path.open(encoding="utf-8", errors="replace")
    fh.seek(0, 2)
    inode = path.stat().st_ino
    try:
        while stop is None or not stop():
            line = fh.readline()
            if line:
                yield line
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                time.sleep(poll)
                continue
            if st.st_ino != inode or st.st_size < fh.tell():
                yield from fh  # the rest of the old file, then the new one from the start
                fh.close()
                fh = path.open(encoding="utf-8", errors="replace")
                inode = st.st_ino
                continue
            time.sleep(poll)
    finally:
        fh.close()


def journal_lines(follow_: bool, since: str | None) -> Iterator[str]:
    cmd = ["journalctl", "-u", "hermes-gateway", "-o", "cat", "--no-pager"]
    cmd += ["--user"] if Path.home() != Path("/root") else []
    if since:
        cmd += ["--since", since]
    if follow_:
        cmd.append("-f")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    yield from proc.stdout


def show(lines: Iterable[str], flt: LogFilter, out: TextIO, *, as_json: bool, color: bool) -> int:
    shown = 0
    for line in lines:
        if not line.strip():
            continue
        entry = parse_line(line)
        if not flt.accepts(entry):
            continue
        out.write((json.dumps(entry) if as_json else render(entry, color)) + "\n")
        out.flush()
        shown += 1
    return shown


def journal_available() -> bool:
    return shutil.which("journalctl") is not None
