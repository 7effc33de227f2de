"""`run_child`: run a helper process for a tool, bounded in wall-clock time, CPU and memory.

Work that can run away on input the model chose (a backtracking regex) goes to a child: a
thread holding the GIL stops the whole gateway, a child is simply killed. The child gets a
minimal environment, its own session (so the kill takes its whole group), and is killed on
timeout and as soon as the tool is asked to stop.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_POLL_S = 0.05
_MAX_OUTPUT = 4 * 1024 * 1024
_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
_NICE = 10  # address space; ripgrep's threads reserve a lot of it


@dataclass(frozen=True, slots=True)
class ChildResult:
    returncode: int | None  # None when it was killed
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    stopped: bool = False
    truncated: bool = False  # more than the output cap was written; the child was killed


def child_env() -> dict[str, str]:
    """What a helper child sees of the environment: enough to run, none of the secrets."""
    return {"PATH": os.defpath, "LANG": "C.UTF-8"}


def run_child(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_s: float,
    should_stop: Callable[[], bool],
    max_output: int = _MAX_OUTPUT,
) -> ChildResult:
    """Run ``argv`` to its end, its timeout, a stop, or ``max_output`` bytes of output."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    _limit(proc.pid, timeout_s)
    try:
        return _collect(proc, timeout_s, should_stop, max_output)
    finally:
        _kill(proc)


def _limit(pid: int, timeout_s: float) -> None:
    """CPU and memory limits, a backstop should the wall-clock kill not come (the gateway
    itself killed); set from outside, since `preexec_fn` is unsafe in a threaded process.
    A lower priority keeps a runaway child from crowding out the gateway on a small machine."""
    cpu = int(timeout_s) + 5
    # it may have ended already, the limits may not be ours to set, prlimit is Linux-only
    with contextlib.suppress(OSError, ValueError, AttributeError):
        resource.prlimit(pid, resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.prlimit(pid, resource.RLIMIT_AS, (_MEMORY_BYTES, _MEMORY_BYTES))
    with contextlib.suppress(OSError):
        nice = max(os.getpriority(os.PRIO_PROCESS, 0), _NICE)  # never above the gateway's
        os.setpriority(os.PRIO_PROCESS, pid, nice)


def _collect(
    proc: subprocess.Popen[bytes],
    timeout_s: float,
    should_stop: Callable[[], bool],
    max_output: int,
) -> ChildResult:
    deadline = time.monotonic() + timeout_s
    chunks: dict[int, list[bytes]] = {1: [], 2: []}  # by stream: 1 out, 2 err
    size = 0
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, 1)  # type: ignore[arg-type]
        sel.register(proc.stderr, selectors.EVENT_READ, 2)  # type: ignore[arg-type]
        while sel.get_map():
            if should_stop():
                return _result(proc, chunks, stopped=True)
            if time.monotonic() > deadline:
                return _result(proc, chunks, timed_out=True)
            for key, _ in sel.select(_POLL_S):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                chunks[key.data].append(data)
                size += len(data)
                if size > max_output:
                    return _result(proc, chunks, truncated=True)
    while proc.poll() is None:  # output closed; the exit is a moment away
        if should_stop():
            return _result(proc, chunks, stopped=True)
        if time.monotonic() > deadline:
            return _result(proc, chunks, timed_out=True)
        time.sleep(0.01)
    return _result(proc, chunks)


def _result(
    proc: subprocess.Popen[bytes], chunks: dict[int, list[bytes]], **flags: bool
) -> ChildResult:
    if flags:
        _kill(proc)
    code = None if flags else proc.returncode
    return ChildResult(code, b"".join(chunks[1]), b"".join(chunks[2]), **flags)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole group (anything it started, even after it exited: a group's
    id is not reused while a member lives), and reap it."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
