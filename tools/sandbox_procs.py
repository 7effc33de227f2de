"""The sandbox's fallback mode, where no namespace holds a child's processes: find them in /proc
(by parentage and by a marker in their environment), kill them, reap the ones reparented to us;
and file permissions for what the fallback cannot hide.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

_PRIVATE_FILES = ("state.db", "state.db-wal", "state.db-shm", "gateway.env", "config.yaml")
_ROUNDS = 5  # a process may fork while we kill: look again until nothing is left


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    return int(fields[1]), fields[0].decode(), int(fields[19])


def _all() -> dict[int, tuple[int, str, int]]:
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            procs[int(name)] = st
    return procs


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of `root` (pid -> start time), root excluded."""
    procs = _all()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, int] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = procs[pid][2]
            todo.extend(children.get(pid, ()))
    return found


def _marked(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def kill_marked(marker: str, token: str, seen: dict[int, int]) -> set[int]:
    """SIGKILL every process carrying `marker=token`, every process in `seen` that is still the
    same process (same start time), and their descendants. Returns the pids killed."""
    needle = f"{marker}={token}".encode()
    me, killed = os.getpid(), set[int]()
    for _ in range(_ROUNDS):
        procs = _all()
        targets = {
            pid
            for pid, (_, state, start) in procs.items()
            if pid != me and state != "Z" and (seen.get(pid) == start or _marked(pid, needle))
        }
        for pid in list(targets):
            targets |= set(descendants(pid))
        targets -= killed | {me}
        if not targets:
            break
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= targets
        time.sleep(0.01)
    return killed


def reap(pids: set[int], within_s: float = 5.0) -> None:
    """Wait for killed processes that became our children (we are their subreaper); the
    child that a Popen owns is left to it (the caller leaves it out of ``pids``).

    Which ones become ours is looked at again each round: a process killed along with its
    parent is reparented to us only once that parent is gone, and on a loaded machine that
    can be well after the kill. Read once, those were never waited for and stayed zombies
    of the gateway for good (a fork bomb left a hundred and more)."""
    me = os.getpid()
    deadline = time.monotonic() + within_s
    left = set(pids)
    while left:
        for pid in list(left):
            st = _stat(pid)
            if st is None:  # gone: reaped (by us, or by a parent that outlived it)
                left.discard(pid)
            elif st[0] == me:
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # not ours after all (a pid reused meanwhile)
                    done = pid
                if done:
                    left.discard(pid)
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def tighten_permissions(path: Path) -> None:
    """Owner-only access to the home (0700), its private files (0600) and logs; a file given
    directly (an explicit --config) gets 0600. Paths we do not own are left as they are."""
    if path.is_dir():
        _chmod(path, 0o700)
        _chmod(path / "logs", 0o700)
        for name in _PRIVATE_FILES:
            _chmod(path / name, 0o600)
    else:
        _chmod(path, 0o600)


def _chmod(path: Path, mode: int) -> None:
    with contextlib.suppress(OSError):
        if path.exists() and path.stat().st_uid == os.geteuid():
            path.chmod(mode)
