"""One memory bound for a sandboxed child and everything it starts, together: a cgroup per call
(v2, or v1's memory controller) under the gateway's own, or, where none can be had, a watcher
summing the processes' resident memory. See docs/isolation.md, "Resource limits"."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

Kind = Literal["cgroup2", "cgroup1", "watcher"]

_PREFIX = "hermes-"
_LEAF = (
    "hermes-gateway"  # cgroup v2: where the gateway moves itself so its cgroup may have children
)
_KILL_ROUNDS = 50
_RMDIR_WAIT_S = 2.0
_PAGE = os.sysconf("SC_PAGE_SIZE")
# Run before anything else of the sandbox, outside its namespace: the first process joins the
# group and only then execs the rest, so every process the child ever starts is inside
_JOIN = 'echo 0 > "$1/cgroup.procs" || exit 125; shift; exec "$@"'


@dataclass(frozen=True, slots=True)
class Support:
    """What this process can have: `base` is where per-call cgroups go (None for the watcher);
    `why` says why there is no cgroup, or what was set up."""

    kind: Kind
    base: Path | None
    why: str


class MemoryGroup(Protocol):
    """The bound of one call: `path` is the cgroup the child joins (None: nothing to join)."""

    limit_bytes: int
    path: Path | None

    def exceeded(self, pids: Iterable[int]) -> bool:
        """True once the group went over its limit (`pids`: its live processes, for the
        watcher; a cgroup knows its own)."""
        ...

    def kill(self) -> None:
        """SIGKILL every process of the group."""
        ...

    def close(self) -> None:
        """Kill what is left and remove the group. Idempotent."""
        ...


@dataclass(slots=True)
class _State:
    support: Support | None = None
    watcher_forced: bool = False


_state = _State()
_lock = threading.Lock()


def support() -> Support:
    """Which mechanism calls get here (probed once: a real cgroup is made and removed)."""
    with _lock:
        if _state.support is None:
            _state.support = _probe()
        if _state.watcher_forced:
            return Support("watcher", None, "forced")
        return _state.support


def force_watcher(on: bool) -> None:
    """Tests: pretend no cgroup can be had (the watcher's path), or stop pretending."""
    with _lock:
        _state.watcher_forced = on


def describe() -> str:
    """One line for the startup log and `hermes doctor`."""
    s = support()
    if s.kind == "watcher":
        return (
            f"no cgroup for tool memory ({s.why}); execute_code's processes' resident memory is "
            "summed every 0.1 s and the script killed when together over its limit"
        )
    version = "v2" if s.kind == "cgroup2" else "v1"
    return (
        f"execute_code runs each script in its own cgroup {version} under {s.base} ({s.why}): "
        "its memory limit holds for all its processes together"
    )


def open_group(limit_bytes: int) -> MemoryGroup:
    """A new bound of `limit_bytes` for one call: a fresh cgroup, or a watcher where none can be
    had (or making this one failed). Blocking (file system): call it from the tool's thread."""
    s = support()
    if s.kind != "watcher" and s.base is not None:
        with contextlib.suppress(OSError):
            return CgroupGroup(s.kind, s.base, limit_bytes)
    return WatchedGroup(limit_bytes)


def join_step(path: Path | None) -> list[str]:
    """The argv prefix that moves the child into `path` before it execs the rest ([] for none)."""
    return [] if path is None else ["/bin/sh", "-c", _JOIN, "hermes-memory", str(path)]


def filesystems() -> list[Path]:
    """The cgroup file systems, for the sandbox to hide: a script that could reach its group's
    files could raise its own limit (the files belong to the gateway's user, which it runs as)."""
    found = set()
    for mount in _mounts():
        if mount.fstype in ("cgroup", "cgroup2"):
            # one cover for the usual parent (a tmpfs holding all the hierarchies)
            top = Path("/sys/fs/cgroup")
            found.add(top if mount.point.is_relative_to(top) else mount.point)
    return sorted(found)


class CgroupGroup:
    """A cgroup made for one call under the gateway's own; the kernel holds the limit."""

    def __init__(self, kind: Kind, base: Path, limit_bytes: int) -> None:
        self.kind, self.limit_bytes = kind, limit_bytes
        self._dir = base / f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.path: Path | None = self._dir
        self._dir.mkdir()
        try:
            _configure(kind, self._dir, limit_bytes)
        except OSError:
            _remove(self._dir)
            raise
        self._over = False
        self._closed = False

    def exceeded(self, pids: Iterable[int] = ()) -> bool:
        if not self._over:
            self._over = _oom_kills(self.kind, self._dir) > 0
        return self._over

    def kill(self) -> None:
        if self.kind == "cgroup2":
            with contextlib.suppress(OSError):
                (self._dir / "cgroup.kill").write_text("1")
        _kill_members(self._dir)

    def close(self) -> None:
        if self._closed:
            return
        self.exceeded()  # read before the directory goes
        self._closed = True
        _remove(self._dir)


class WatchedGroup:
    """No cgroup: the processes' resident memory, summed whenever asked (the caller asks every
    0.1 s); over the limit, the caller kills the child and all it started."""

    path: Path | None = None

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._over = False

    def exceeded(self, pids: Iterable[int] = ()) -> bool:
        if not self._over:
            pids = list(pids)
            # resident pages overcount what processes share (libraries, copy-on-write after a
            # fork): only when their sum is over is the fair share (Pss) summed to decide
            if sum(map(_resident, pids)) > self.limit_bytes:
                self._over = sum(map(_proportional, pids)) > self.limit_bytes
        return self._over

    def kill(self) -> None:
        """Nothing of its own: the caller kills the child's processes."""

    def close(self) -> None:
        """Nothing to remove."""


def _configure(kind: Kind, path: Path, limit: int) -> None:
    if kind == "cgroup2":
        (path / "memory.max").write_text(str(limit))
        # no swap to spill into, and one process over the limit takes all the others with it
        for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
            if (path / name).exists():
                (path / name).write_text(value)
        return
    (path / "memory.limit_in_bytes").write_text(str(limit))
    # memory + swap; its limit may not be lower than the memory's, which is set first
    memsw = path / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        with contextlib.suppress(OSError):
            memsw.write_text(str(limit))


def _oom_kills(kind: Kind, path: Path) -> int:
    """How many processes the kernel killed in the group for want of memory."""
    name = "memory.events" if kind == "cgroup2" else "memory.oom_control"
    try:
        text = (path / name).read_text()
    except OSError:
        return 0
    counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
    return sum(int(counts.get(key, "0")) for key in ("oom_kill", "oom_group_kill", "under_oom"))


def _members(path: Path) -> list[int]:
    try:
        return [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_members(path: Path) -> None:
    """cgroup v1 has no cgroup.kill: SIGKILL whoever is listed until nobody is (a process may
    fork while we kill)."""
    me = os.getpid()
    for _ in range(_KILL_ROUNDS):
        pids = [pid for pid in _members(path) if pid != me]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _remove(path: Path) -> None:
    """Kill the members and remove the directory; a dying process keeps it busy a moment."""
    deadline = time.monotonic() + _RMDIR_WAIT_S
    while True:
        _kill_members(path)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return  # left for the next start to remove (see _remove_stale)
            time.sleep(0.02)


def _resident(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _proportional(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return _resident(pid)
    found = re.search(r"^Pss:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else _resident(pid)


@dataclass(frozen=True, slots=True)
class _Mount:
    point: Path
    root: str
    fstype: str
    options: frozenset[str]


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts() -> list[_Mount]:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            options = frozenset(tail[2].split(","))
            found.append(_Mount(Path(_unescape(fields[4])), _unescape(fields[3]), tail[0], options))
    return found


def _own_cgroup() -> tuple[Kind, Path] | None:
    """The directory of this process's memory cgroup: v1's memory hierarchy when there is one
    (then v2 has no memory controller), else v2's."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    entries = [line.split(":", 2) for line in lines if line.count(":") >= 2]
    mounts = _mounts()
    for _, controllers, path in entries:
        if "memory" in controllers.split(","):
            for m in mounts:
                if m.fstype == "cgroup" and "memory" in m.options and (d := _within(m, path)):
                    return "cgroup1", d
    for hierarchy, _, path in entries:
        if hierarchy == "0":
            for m in mounts:
                if m.fstype == "cgroup2" and (d := _within(m, path)):
                    return "cgroup2", d
    return None


def _within(mount: _Mount, path: str) -> Path | None:
    """Where cgroup `path` is under `mount` (which may show only a part of the hierarchy)."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return mount.point / path[len(root) :].lstrip("/")


def _probe() -> Support:
    own = _own_cgroup()
    if own is None:
        return Support("watcher", None, "no cgroup memory controller is mounted")
    kind, base = own
    try:
        why = _prepare_v2(base) if kind == "cgroup2" else "the gateway's own"
        _remove_stale(base)
        CgroupGroup(kind, base, 64 * 1024 * 1024).close()
    except OSError as exc:
        why = f"cannot make a cgroup under {base}: {exc.strerror or exc}"
        return Support("watcher", None, why)
    return Support(kind, base, why)


def _prepare_v2(own: Path) -> str:
    """cgroup v2 lets a cgroup with processes have no children with controllers: the gateway,
    alone in its cgroup (as a systemd service with Delegate=), moves itself into a leaf and
    enables the memory controller for its cgroup's children."""
    if "memory" not in (own / "cgroup.controllers").read_text().split():
        raise OSError(0, "the memory controller is not delegated to it (systemd: Delegate=memory)")
    if "memory" in (own / "cgroup.subtree_control").read_text().split():
        return "the gateway's cgroup"
    if _members(own) != [os.getpid()]:
        raise OSError(0, "the gateway shares its cgroup with other processes")
    leaf = own / _LEAF
    leaf.mkdir(exist_ok=True)
    (leaf / "cgroup.procs").write_text(str(os.getpid()))
    (own / "cgroup.subtree_control").write_text("+memory")
    return f"the gateway moved itself into {_LEAF} there"


def _remove_stale(base: Path) -> None:
    """Groups left by a gateway that died during a call (its pid is in the name)."""
    for path in base.glob(f"{_PREFIX}*-*"):
        owner = path.name.removeprefix(_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            _remove(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
