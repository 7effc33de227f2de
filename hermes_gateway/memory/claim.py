"""`hermes memory claim PLATFORM USER_ID`: hand a `<home>/MEMORY.md` left from before per-user
memory to its owner: its entries are added to that user's file (those already there are not
repeated), then it is renamed `MEMORY.md.claimed`, so it is not offered again. The operator
decides whose it is; nothing does this on its own."""

from __future__ import annotations

import os
from pathlib import Path

from tools.files import atomic_write
from tools.memory import FILE_NAME, SEPARATOR, USERS_DIR, locked, read_entries, user_file


def claim(home: Path, platform: str, user_id: str) -> str:
    """Do it; what happened, in words (raises `ValueError` when there is nothing to do)."""
    legacy = home / FILE_NAME
    entries = read_entries(legacy)
    if not entries:
        raise ValueError(f"{legacy} does not exist or is empty: nothing to claim")
    target = user_file(home / USERS_DIR, f"{platform}/{user_id}")
    with locked(target):  # the memory tool's lock: a running gateway waits
        mine = read_entries(target)
        added = [e for e in entries if e not in mine]
        text = SEPARATOR.join(mine + added)
        atomic_write(target, (text + "\n").encode())
    os.replace(legacy, legacy.with_name(FILE_NAME + ".claimed"))
    return (
        f"{len(added)} entries of {legacy} added to {target} ({len(mine)} were there); "
        f"{legacy} renamed {FILE_NAME}.claimed"
    )


def run_claim(home: Path, platform: str, user_id: str) -> int:
    try:
        print(claim(home, platform, user_id))
    except (ValueError, OSError) as exc:
        print(f"hermes: {exc}")
        return 1
    return 0
