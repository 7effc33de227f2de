"""The operator's control token: `control.token` when configured, else one the gateway makes at
its first start in `<home>/control.token` (mode 0600 from creation) and reuses; the CLI reads
the same file, so operator routes are never open, not even on loopback. No asyncio or logging
here: the CLI imports it (the server's `ControlToken` is in control/app.py)."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "control.token"
_VALID = re.compile(r"[\x21-\x7e]{16,512}")  # what fits a header; a shorter one is replaced


def token_path(home: Path) -> Path:
    return home / FILE_NAME


def read_token_file(home: Path) -> str | None:
    """The generated token, or None when there is none the caller can read (the gateway runs
    as another user, or has never started with this home)."""
    try:
        text = token_path(home).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _VALID.fullmatch(text) else None


def operator_token(configured: str | None, home: Path) -> str | None:
    """What the CLI sends: the configured token first, else the gateway's generated one."""
    return configured or read_token_file(home)


@dataclass(frozen=True, slots=True)
class TokenFile:
    token: str
    path: Path
    created: bool  # made just now
    was_mode: int | None  # a reused file's permissions, when they let others in (now 0600)


def ensure_token_file(home: Path) -> TokenFile:
    """The token in ``<home>/control.token``, made on first use (blocking: call it in a
    thread). The file is written whole under a temporary name with mode 0600 and linked into
    place, so no reader ever sees it partly written or readable by others, and of two gateways
    starting on one home both end up with the one that got there first."""
    path = token_path(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = read_token_file(home)
    if existing is not None:
        return TokenFile(existing, path, created=False, was_mode=_owner_only(path))
    token = secrets.token_urlsafe(32)
    temp = home / f".{FILE_NAME}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
            f.flush()
            os.fsync(f.fileno())
        _put_in_place(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    found = read_token_file(home)
    if found is None:  # unreadable right after writing it: the home is not ours to use
        raise OSError(f"cannot read back {path}")
    return TokenFile(found, path, created=found == token, was_mode=None)


def _put_in_place(temp: Path, path: Path) -> None:
    if path.exists():  # a file we could not use (empty, garbled): replaced
        os.replace(temp, path)
        return
    try:
        os.link(temp, path)  # fails if another start made one meanwhile: theirs is kept
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links
        os.replace(temp, path)


def _owner_only(path: Path) -> int | None:
    """A reused file that someone opened up to others is closed again; its old mode then."""
    mode = path.stat().st_mode & 0o777
    if not mode & 0o077:
        return None
    os.chmod(path, 0o600)
    return mode
