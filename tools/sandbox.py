"""Where tools run other programs: `spawn` starts one confined child, `Sandboxed.kill` ends it
and everything it started. See docs/isolation.md for the two modes and their limits.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from tools import memory_group, sandbox_procs

Mode = Literal["namespace", "fallback"]
MARKER = "HERMES_SANDBOX"  # names a child's processes in fallback mode, where no namespace does

_SCAN_EVERY_S = 0.2
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_UNSHARE = [
    "--user",
    "--map-root-user",
    "--pid",
    "--fork",
    "--kill-child",
    "--mount",
    "--mount-proc",
    "--propagation",
    "private",
]
# Runs as root of the new user namespace: covers the hidden paths, puts the workspace back,
# then drops every capability so the command cannot undo the mounts.
_SETUP = r"""
set -e
hide() {
  if [ -d "$1" ]; then mount -t tmpfs -o size=64k,mode=0755 hermes-hidden "$1"
  elif [ -e "$1" ]; then mount --bind /dev/null "$1"; fi
}
ws=$1; cwd=$2; rebind=$3; shift 3
exec 3<"$ws"
while [ "$1" != "--" ]; do hide "$1"; shift; done
shift
if [ "$rebind" = 1 ]; then mkdir -p "$ws"; mount --no-canonicalize --bind /proc/self/fd/3 "$ws"; fi
exec 3<&-
while [ "$1" != "--" ]; do hide "$1"; shift; done
shift
cd "$cwd"
exec setpriv --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"
"""


@dataclass(frozen=True, slots=True)
class Limits:
    """Kernel limits for the child and all it starts (None = inherit)."""

    cpu_s: int | None = None
    memory_bytes: int | None = None
    open_files: int | None = None
    processes: int | None = None  # per user (see docs/isolation.md); root is exempt
    # a cgroup (tools/memory_group.py) the child joins before anything else of it runs
    memory_group: Path | None = None


@dataclass(slots=True)
class _State:
    mode: Mode | None = None
    why: str = ""
    protect: tuple[Path, ...] = ()
    # a fresh /proc needs the host's to be fully visible: under systemd's ProtectKernelTunables
    # (read-only /proc/sys on top of it) the kernel refuses one, and the host's stays in view
    fresh_proc: bool = True


_state = _State()
_lock = threading.Lock()


def setup(private: Sequence[Path], hide: Sequence[Path] = ()) -> str:
    """Once per process, before the first tool runs: choose the mode, hide `private` (the
    gateway's home, its config file, its database) and `hide` from every child, make `private`
    owner-only, and tighten what the mode cannot hide. Returns a line for the startup log
    saying what is and is not protected."""
    with _lock:
        # the cgroup file systems too: a child reaching its memory group could raise its limit
        hidden = (*private, *hide, *memory_group.filesystems())
        _state.protect = tuple(Path(p).resolve() for p in hidden)
    mode = current_mode()
    for path in private:
        sandbox_procs.tighten_permissions(Path(path))
    if mode == "namespace" and _state.fresh_proc:
        return "tool processes run in user+pid+mount namespaces; the home is hidden from them"
    if mode == "namespace":
        # the host's /proc is in view: only the process itself can read its environment then
        _prctl(_PR_SET_DUMPABLE, 0)
        return (
            "tool processes run in user+pid+mount namespaces; the home is hidden from them; "
            f"a private /proc was refused ({_state.why}), so they see the host's, where the "
            "gateway's own entries (its environment) are unreadable to them"
        )
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if os.geteuid() == 0:
        exposed = "everything, the gateway's environment included (it runs as root)"
    else:
        exposed = "the gateway user's files, its home and database included"
    return (
        f"namespaces unavailable ({_state.why}); fallback: escaped processes are tracked and "
        f"killed, but tool processes can read {exposed}"
    )


def current_mode() -> Mode:
    """`namespace` when this machine lets us build one (probed once), else `fallback`."""
    with _lock:
        if _state.mode is None:
            _state.mode, _state.why = _probe()
        return _state.mode


def force_mode(mode: Mode | None) -> None:
    """Tests: pretend the probe said `mode` (None: probe again on next use)."""
    with _lock:
        _state.mode, _state.why, _state.fresh_proc = mode, "forced", True


class Sandboxed:
    """A running child: `poll`, `wait`, `stdout`, `stderr` like Popen; `kill` ends it and its
    descendants, however they detached (setsid, double fork, nohup). Call `kill` in every case,
    after a normal exit too; in fallback mode `poll` (not `wait`) records the descendants."""

    def __init__(self, proc: subprocess.Popen[bytes], mode: Mode, token: str) -> None:
        self.proc = proc
        self.mode = mode
        self.token = token
        self.stdout: IO[bytes] | None = proc.stdout
        self.stderr: IO[bytes] | None = proc.stderr
        self._seen: dict[int, int] = {}
        self._scanned = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        if self.mode == "fallback" and time.monotonic() - self._scanned > _SCAN_EVERY_S:
            # remember who descends from the child while it lives: after a double fork they
            # are reparented to us and /proc no longer says whose they were
            self._seen.update(sandbox_procs.descendants(self.proc.pid))
            self._scanned = time.monotonic()
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL everything the child started, then reap the child. Idempotent."""
        killed: set[int] = set()
        # until the child is reaped its pid, and so its group id, cannot name another process
        unreaped = self.proc.returncode is None
        if self.mode == "namespace":
            # the namespace's PID 1 dies with its parent (--kill-child), taking every process
            # of the namespace with it; once the parent has exited, so has all of it
            if unreaped:
                self.proc.send_signal(signal.SIGKILL)
        else:
            if unreaped:
                _signal(-self.proc.pid, signal.SIGKILL)
                self._seen.update(sandbox_procs.descendants(self.proc.pid))
            killed = sandbox_procs.kill_marked(MARKER, self.token, self._seen)
        try:
            self.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        sandbox_procs.reap(killed - {self.proc.pid})


def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    workspace: Path,
    env: Mapping[str, str],
    limits: Limits = Limits(),
    stdout: int | IO[bytes] | None = subprocess.PIPE,
    stderr: int | IO[bytes] | None = subprocess.STDOUT,
    pass_fds: Sequence[int] = (),
) -> Sandboxed:
    """Start `argv` in `cwd` (inside `workspace`) with exactly `env`, confined by the current
    mode. Blocking (fork/exec): call it from a worker thread, never the event loop.
    `pass_fds` stay open in the child under their numbers; use numbers above 9 (the namespace
    setup uses fd 3)."""
    mode = current_mode()
    token = uuid.uuid4().hex
    wrapped = [*_with_limits(limits), *argv]
    if mode == "namespace":
        wrapped = _in_namespace(wrapped, cwd, workspace)
    # joined outside the namespace, before it is made: nothing inside can leave the group
    wrapped = [*memory_group.join_step(limits.memory_group), *wrapped]
    # dies with the gateway (and in a namespace takes everything with it): nothing is orphaned
    # by a crash
    if setpriv := shutil.which("setpriv"):
        wrapped = [setpriv, "--pdeathsig", "KILL", "--", *wrapped]
    proc = subprocess.Popen(
        wrapped,
        cwd=cwd,
        env={**env, MARKER: token} if mode == "fallback" else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    return Sandboxed(proc, mode, token)


def _in_namespace(argv: list[str], cwd: Path, workspace: Path) -> list[str]:
    ws = workspace.resolve()
    hidden = [p for p in _state.protect if p.exists() and p != ws]
    rebind = any(ws.is_relative_to(p) for p in hidden)
    # what lies inside the workspace is hidden again once the workspace is put back
    inside = [str(p) for p in hidden if p.is_relative_to(ws)]
    flags = _UNSHARE if _state.fresh_proc else [f for f in _UNSHARE if f != "--mount-proc"]
    return [
        _tool("unshare"),
        *flags,
        "--",
        "/bin/sh",
        "-c",
        _SETUP,
        "hermes-sandbox",
        str(ws),
        str(cwd.resolve()),
        "1" if rebind else "0",
        *map(str, hidden),
        "--",
        *inside,
        "--",
        *argv,
    ]


def _with_limits(limits: Limits) -> list[str]:
    """A shell that sets the limits and execs the command; each limit on its own so one the
    kernel refuses (raising a hard limit) leaves the others in force."""
    values = {
        "-t": limits.cpu_s,
        "-v": None if limits.memory_bytes is None else max(1, limits.memory_bytes // 1024),
        "-n": limits.open_files,
        # processes: -u in bash, -p in dash (in bash -p is the pipe size, read-only: refused)
        "-u": limits.processes,
        "-p": limits.processes,
    }
    script = "".join(f"ulimit {flag} {int(v)} 2>/dev/null; " for flag, v in values.items() if v)
    return ["/bin/sh", "-c", script + 'exec "$@"', "hermes-limits"] if script else []


def _probe() -> tuple[Mode, str]:
    """Build a namespace the way `spawn` does, hide a directory in it, and check the result:
    first with a private /proc, then (refused, as under ProtectKernelTunables) without."""
    if not shutil.which("unshare") or not shutil.which("setpriv"):
        return "fallback", "util-linux unshare/setpriv not installed"
    _state.fresh_proc = True
    refused = _try_namespace()
    if refused is None:
        return "namespace", ""
    _state.fresh_proc = False
    if _try_namespace() is None:
        return "namespace", refused
    _state.fresh_proc = True
    return "fallback", refused


def _try_namespace() -> str | None:
    """None when a namespace can be built as `spawn` builds it now, else why not."""
    here = Path("/")
    argv = _in_namespace(["/bin/sh", "-c", "echo $$"], here, here)
    try:
        out = subprocess.run(
            argv, capture_output=True, timeout=10, stdin=subprocess.DEVNULL, check=False, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if out.returncode != 0 or out.stdout.strip() != b"1":
        reason = out.stderr.decode("utf-8", "replace").strip().splitlines()
        return reason[-1] if reason else f"exit {out.returncode}"
    return None


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/bin/{name}"


def _signal(pid: int, sig: int) -> None:
    """`os.kill`, quiet when the process is already gone."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, value, 0, 0, 0)
