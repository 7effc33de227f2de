"""Where tools run other programs: `spawn` starts one walled-in child, `Sandboxed.kill` ends it
and everything it started. See docs/isolation.md for the walls, the two modes and their limits.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from tools import memory_group, sandbox_procs
from tools import walls as walls_step

Mode = Literal["namespace", "fallback"]
Network = Literal["none", "host"]
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
# Shared places where programs leave sockets and scratch files: each call gets empty ones. The
# namespace is built by tools/walls.py, run as root of the new user namespace; its last step
# drops every capability, so nothing it built can be undone.
_PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run")
_DROP_CAPS = ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Kernel limits for the child and all it starts (None = inherit)."""

    cpu_s: int | None = None
    memory_bytes: int | None = None
    open_files: int | None = None
    processes: int | None = None  # per user (see docs/isolation.md); root is exempt
    # a cgroup (tools/memory_group.py) the child joins before anything else of it runs
    memory_group: Path | None = None


@dataclass(frozen=True, slots=True)
class Walls:
    """What this machine lets the sandbox build: `writes` (Landlock: nothing written outside the
    workspace, the private scratch space and the opened paths), `network` (no way to the
    gateway's ports or any local service), `hidden` (the home and store out of sight)."""

    writes: bool
    network: bool
    hidden: bool
    landlock_abi: int = 0


@dataclass(slots=True)
class _State:
    mode: Mode | None = None
    why: str = ""
    protect: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    network: Network = "none"
    tmp_mb: int = 1024
    # what a child needs in view to start: the interpreter and this code, wherever they live
    runtime: tuple[Path, ...] = ()
    landlock_abi: int | None = None
    # a fresh /proc needs the host's to be fully visible: under systemd's ProtectKernelTunables
    # (read-only /proc/sys on top of it) the kernel refuses one, and the host's stays in view
    fresh_proc: bool = True


_state = _State()
_lock = threading.Lock()


def setup(
    private: Sequence[Path],
    hide: Sequence[Path] = (),
    *,
    writable: Sequence[Path] = (),
    network: Network = "none",
    tmp_mb: int = 1024,
) -> str:
    """Once per process, before the first tool runs: choose the mode, hide `private` (the
    gateway's home, its config file, its database) and `hide` from every child, open `writable`
    to them besides the workspace, cut them off the network unless `network` is "host", make
    `private` owner-only, and tighten what the mode cannot hide. Returns a line for the startup
    log saying what is and is not protected."""
    with _lock:
        # the cgroup file systems too: a child reaching its memory group could raise its limit
        hidden = (*private, *hide, *memory_group.filesystems())
        _state.protect = tuple(Path(p).resolve() for p in hidden)
        _state.writable = tuple(Path(p).resolve() for p in writable)
        _state.network, _state.tmp_mb = network, tmp_mb
        _state.runtime = _runtime_paths()
    mode = current_mode()
    for path in private:
        sandbox_procs.tighten_permissions(Path(path))
    return f"{_hiding(mode)}; {describe(walls())}"


def _hiding(mode: Mode) -> str:
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


def walls(network: Network | None = None) -> Walls:
    """Which walls stand around every tool process on this machine, with this setup (or with
    `network` instead of the one set up)."""
    mode = current_mode()
    abi = _landlock_abi()
    cut = (network or _state.network) == "none" and (
        mode == "namespace" or abi >= walls_step.NET_ABI
    )
    return Walls(writes=abi > 0, network=cut, hidden=mode == "namespace", landlock_abi=abi)


def describe(w: Walls, network: Network | None = None) -> str:
    """One sentence on the walls, for the startup line and `hermes doctor`."""
    network = network or _state.network
    parts = [
        f"writes confined to the workspace (Landlock ABI {w.landlock_abi})"
        if w.writes
        else "NO write wall (this kernel has no Landlock): every command not known to be "
        "read-only is asked",
    ]
    if network == "host":
        parts.append("network shared with the gateway (tools.terminal.network: host)")
    elif w.network:
        parts.append("no network (a loopback of their own)")
    else:
        parts.append("NO network wall: tool processes reach the gateway's ports")
    return "; ".join(parts)


def _landlock_abi() -> int:
    with _lock:
        if _state.landlock_abi is None:
            _state.landlock_abi = walls_step.abi()
        return _state.landlock_abi


def _runtime_paths() -> tuple[Path, ...]:
    """The interpreter, its libraries and this code: put back in view when a cover hides them
    (a checkout or virtual environment under /tmp, as CI's may be)."""
    executable = Path(sys.executable)
    paths = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), executable.parent]
    paths += [executable.resolve().parent, Path(__file__).resolve().parent.parent]
    return tuple(sorted({p.resolve() for p in paths if p.exists()}))


def current_mode() -> Mode:
    """`namespace` when this machine lets us build one (probed once), else `fallback`."""
    with _lock:
        if _state.mode is None:
            _state.mode, _state.why = _probe()
        return _state.mode


def force_mode(mode: Mode | None, *, landlock_abi: int | None = None) -> None:
    """Tests: pretend the probe said `mode` (None: probe again on next use), and that the
    kernel's Landlock is `landlock_abi` (0: none; None: ask the kernel)."""
    with _lock:
        _state.mode, _state.why, _state.fresh_proc = mode, "forced", True
        _state.landlock_abi = landlock_abi


class Sandboxed:
    """A running child: `poll`, `wait`, `stdout`, `stderr` like Popen; `kill` ends it and its
    descendants, however they detached (setsid, double fork, nohup). Call `kill` in every case,
    after a normal exit too; in fallback mode `poll` (not `wait`) records the descendants."""

    def __init__(
        self, proc: subprocess.Popen[bytes], mode: Mode, token: str, scratch: Path | None = None
    ) -> None:
        self.proc = proc
        self.mode = mode
        self.token = token
        self.stdout: IO[bytes] | None = proc.stdout
        self.stderr: IO[bytes] | None = proc.stderr
        self._seen: dict[int, int] = {}
        self._scanned = 0.0
        self._scratch = scratch

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
            # of the namespace with it; once the parent has exited, so has all of it. PID 1,
            # orphaned, is reparented to us (the subreaper): it is ours to reap
            if unreaped:
                killed = set(sandbox_procs.descendants(self.proc.pid))
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
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


@dataclass(frozen=True, slots=True)
class Prepared:
    """A command made ready to start inside the walls: `argv`, and what its environment must
    add (`env`); `release` after it has ended (fallback mode: its escaped processes, its
    scratch directory)."""

    argv: list[str]
    env: dict[str, str]
    mode: Mode
    token: str
    scratch: Path | None = None

    def release(self) -> None:
        if self.mode == "fallback":
            sandbox_procs.reap(sandbox_procs.kill_marked(MARKER, self.token, {}))
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def prepare(
    argv: Sequence[str], *, cwd: Path, workspace: Path, limits: Limits = Limits()
) -> Prepared:
    """What `spawn` starts, for a caller that starts it itself (an MCP client owning the
    pipes): `argv` in `cwd` inside the walls of the current mode."""
    mode = current_mode()
    token = uuid.uuid4().hex
    walled = walls()
    command = [*_with_limits(limits), *argv]
    scratch = None
    extra: dict[str, str] = {}
    if mode == "namespace":
        wrapped = _in_namespace(command, cwd, workspace, walled)
    else:
        # no mount namespace to give it an empty /tmp: a directory of its own instead
        scratch = Path(tempfile.mkdtemp(prefix="hermes-tool-"))
        extra = {"TMPDIR": str(scratch), MARKER: token}
        wrapped = _walled(command, walled, [workspace, scratch], {})
    # joined outside the namespace, before it is made: nothing inside can leave the group
    wrapped = [*memory_group.join_step(limits.memory_group), *wrapped]
    # dies with the gateway (and in a namespace takes everything with it): nothing is
    # orphaned by a crash
    if setpriv := shutil.which("setpriv"):
        wrapped = [setpriv, "--pdeathsig", "KILL", "--", *wrapped]
    return Prepared(wrapped, extra, mode, token, scratch)


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
    """Start `argv` in `cwd` (inside `workspace`) with exactly `env`, inside the walls of the
    current mode. Blocking (fork/exec): call it from a worker thread, never the event loop.
    `pass_fds` stay open in the child under their numbers."""
    ready = prepare(argv, cwd=cwd, workspace=workspace, limits=limits)
    try:
        proc = subprocess.Popen(
            ready.argv,
            cwd=cwd,
            env={**env, **ready.env},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        if ready.scratch is not None:
            shutil.rmtree(ready.scratch, ignore_errors=True)
        raise
    return Sandboxed(proc, ready.mode, ready.token, ready.scratch)


def _covers() -> tuple[list[Path], list[str]]:
    """What a namespace covers: the hidden paths, and the shared scratch places."""
    hidden = [p for p in _state.protect if p.exists()]
    tmp = [t for t in _PRIVATE_TMP if os.path.isdir(t) and not os.path.islink(t)]
    return hidden, tmp


def _put_back(ws: Path) -> list[str]:
    """What must stay in view though a cover hides it (the workspace in the home, the
    interpreter under /tmp, an opened path under /run): the namespace opens each before it
    covers anything and mounts it back where it was."""
    hidden, tmp = _covers()
    covered = [*(p for p in hidden if p != ws), *map(Path, tmp)]
    wanted = {ws, *_state.writable, *_state.runtime}
    return sorted(
        str(p) for p in wanted if p.exists() and any(p.is_relative_to(c) for c in covered)
    )


def walled_command(argv: Sequence[str], workspace: Path, *, network: Network) -> list[str] | None:
    """`argv` inside the namespace walls with `network`, for another program to start (the
    browser's driver starts Chromium through it): the home hidden, writes only to `workspace`
    and a private /tmp, no capabilities. None when this machine cannot build a namespace."""
    if current_mode() != "namespace":
        return None
    return _in_namespace(list(argv), workspace, workspace, walls(network), network)


def _in_namespace(
    argv: list[str], cwd: Path, workspace: Path, walled: Walls, network: Network | None = None
) -> list[str]:
    network = network or _state.network
    ws = workspace.resolve()
    hidden, tmp = _covers()
    hidden = [p for p in hidden if p != ws]
    put_back = _put_back(ws)
    flags = _UNSHARE if _state.fresh_proc else [f for f in _UNSHARE if f != "--mount-proc"]
    if network == "none":
        flags = [*flags, "--net"]
    mounts = {
        "mounts": True,
        "cwd": str(cwd.resolve()),
        "hide": [str(p) for p in hidden],
        "tmp": tmp,
        "tmp_size": f"{_state.tmp_mb}m",
        "put_back": put_back,
        # the interpreter and this code come back read-only; the workspace and opened paths not
        "read_only": [p for p in put_back if Path(p) not in {ws, *_state.writable}],
        # what lies inside a path put back is hidden again once it is back
        "hide_inside": [str(p) for p in hidden if any(p.is_relative_to(b) for b in put_back)],
        "loopback": network == "none",
    }
    inner = [_tool("setpriv"), *_DROP_CAPS, *argv]
    return [_tool("unshare"), *flags, "--", *_walled(inner, walled, [ws, *map(Path, tmp)], mounts)]


def _walled(
    argv: list[str], walled: Walls, scratch: Sequence[Path], mounts: Mapping[str, object]
) -> list[str]:
    """`argv` behind tools/walls.py: in a namespace, the `mounts` built first; writes only to
    the workspace, `scratch` and the opened paths; outside a namespace, TCP and signals to the
    rest of the machine are cut instead (where the kernel can)."""
    in_namespace = bool(mounts)
    if not walled.writes and not in_namespace:
        return argv
    spec = {
        **mounts,
        "confine": walled.writes,
        "writable": [str(p) for p in (*scratch, *_state.writable)],
        "deny_tcp": not in_namespace and _state.network == "none",
        "scope": not in_namespace,
    }
    python = os.path.realpath(sys.executable)
    return [python, "-I", "-S", walls_step.__file__, json.dumps(spec), "--", *argv]


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
    argv = _in_namespace(["/bin/sh", "-c", "echo $$"], here, here, _NO_WALLS)
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


_NO_WALLS = Walls(writes=False, network=False, hidden=False)


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
