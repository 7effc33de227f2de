"""`run_child`: run a helper process for a tool, bounded in wall-clock time, CPU and memory.

Work that can run away on input the model chose (a backtracking regex) goes to a child: a
thread holding the GIL stops the whole gateway, a child is simply killed. The child gets a
minimal environment and runs in the tools' sandbox, and it is killed (with everything it
started) on timeout and as soon as the tool is asked to stop.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import sandbox

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
    """Run ``argv`` to its end, its timeout, a stop, or ``max_output`` bytes of output.

    It runs in the tools' sandbox (``cwd`` is the workspace): the gateway's home hidden,
    everything it starts killed with it. CPU and memory limits are the backstop should the
    wall-clock kill not come (the gateway itself killed), and a lower priority keeps a
    runaway child from crowding out the gateway on a small machine."""
    limits = sandbox.Limits(cpu_s=int(timeout_s) + 5, memory_bytes=_MEMORY_BYTES)
    nice = ["nice", "-n", str(_NICE)] if shutil.which("nice") else []
    proc = sandbox.spawn(
        [*nice, *argv],
        cwd=cwd,
        workspace=cwd,
        env=child_env(),
        limits=limits,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        return _collect(proc, timeout_s, should_stop, max_output)
    finally:
        _kill(proc)


def _collect(
    proc: sandbox.Sandboxed,
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


def _result(proc: sandbox.Sandboxed, chunks: dict[int, list[bytes]], **flags: bool) -> ChildResult:
    if flags:
        _kill(proc)
    code = None if flags else proc.returncode
    return ChildResult(code, b"".join(chunks[1]), b"".join(chunks[2]), **flags)


def _kill(proc: sandbox.Sandboxed) -> None:
    """End the child and anything it started (also after a normal exit), and close its pipes."""
    proc.kill()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
