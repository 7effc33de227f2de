"""`terminal`: run a shell command in the workspace, in its own process group.

The command runs in the sandbox (tools/sandbox.py) with an allow-listed environment (built once
by the config), a timeout, and an output cap (the start and the end are kept). When it ends, times
out or is stopped, everything it started is killed, detached or not. Dangerous commands ask the
user first (`tools.terminal.approval`).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from tools import sandbox
from tools.approval import MAX_COMMAND_CHARS, UNWALLED, approve, dangerous_reason, read_only
from tools.errors import ToolError
from tools.host import ApprovalRequest
from tools.paths import resolve_in_workspace
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import TerminalSettings, ToolSettings

_POLL_S = 0.05
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_QUIET = {"PAGER": "cat", "GIT_PAGER": "cat", "TERM": "dumb", "NO_COLOR": "1"}


class TerminalArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(
        description="A shell command line (bash), run non-interactively with no input, e.g. "
        "'ls -la src && git status'. Do not start programs that wait for keyboard input.",
        min_length=1,
        max_length=MAX_COMMAND_CHARS,  # past this the approval screen could not read it
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds before the command is killed. Default 60; the configured maximum "
        "applies (600 unless changed).",
    )
    workdir: str = Field(".", description="Directory to run in, relative to the workspace root.")


class TerminalTool(ModelTool):
    name = "terminal"
    description = (
        "Run a shell command in the workspace and return its combined stdout/stderr and exit "
        "code. Long output keeps its start and end; background processes end with the command. "
        "Commands that look destructive (rm -r, sudo, curl | sh, writes outside the "
        "workspace, ...) may need the user's approval."
    )
    parallel_safe = False
    Args = TerminalArgs

    def __init__(self, settings: TerminalSettings) -> None:
        self.settings = settings

    def call(self, args: TerminalArgs, ctx: ToolContext) -> str:
        ctx.workspace.mkdir(parents=True, exist_ok=True)
        cwd = resolve_in_workspace(ctx.workspace, args.workdir)
        if not cwd.is_dir():
            raise ToolError(f"workdir {args.workdir.strip()!r} is not a directory")
        policy = self.settings.approval
        if policy != "off":
            reason = dangerous_reason(args.command, ctx.workspace, cwd)
            if not reason and not sandbox.walls().writes and not read_only(args.command):
                reason = UNWALLED  # no wall stops a write: the screen's word is not enough
            if policy == "always" or reason:
                request = ApprovalRequest(
                    ctx.session_key, self.name, args.command, reason or "every command is asked"
                )
                refusal = approve(ctx.host, request, ctx.should_stop)
                if refusal:
                    raise ToolError(refusal)
        timeout = min(args.timeout_s or self.settings.timeout_s, self.settings.max_timeout_s)
        env = {"PATH": _DEFAULT_PATH, **self.settings.env, "HOME": str(ctx.workspace), **_QUIET}
        return run_command(args.command, cwd, env, timeout, ctx)


class _Capture:
    """Keeps the first and last bytes of a stream, and how many were dropped between."""

    def __init__(self, limit: int) -> None:
        self.head_cap = limit * 2 // 5
        self.tail_cap = limit - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        excess = len(self.tail) - self.tail_cap
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n[... {self.dropped} bytes of output omitted ...]\n{tail}"
        return head + tail


def run_command(
    command: str, cwd: Path, env: dict[str, str], timeout: float, ctx: ToolContext
) -> str:
    shell = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
    capture = _Capture(max(1000, ctx.max_output_chars - 200))
    started = time.monotonic()
    child = sandbox.spawn([shell, "-c", command], cwd=cwd, workspace=ctx.workspace, env=env)
    assert child.stdout is not None
    reader = threading.Thread(
        target=_pump, args=(child.stdout, capture), name="hermes-terminal-read", daemon=True
    )
    reader.start()
    ended = None
    try:
        while child.poll() is None:
            if ctx.should_stop():
                ended = "interrupted"
                break
            if time.monotonic() - started > timeout:
                ended = "timeout"
                break
            time.sleep(_POLL_S)
    finally:
        child.kill()  # also when it exited: what it left running in the background goes too
    reader.join(2.0)
    seconds = time.monotonic() - started
    output = capture.text().rstrip("\n")
    if ended == "interrupted":
        raise ToolError(
            f"interrupted by the user; the command was killed. Output so far:\n{output}"
        )
    if ended == "timeout":
        raise ToolError(
            f"timed out after {timeout:g} s; the command was killed. Output so far:\n{output}"
        )
    footer = f"[exit code {child.returncode}, {seconds:.1f} s]"
    return f"{output}\n{footer}" if output else f"(no output)\n{footer}"


def _pump(stream: IO[bytes], capture: _Capture) -> None:
    fd = stream.fileno()
    try:
        while chunk := os.read(fd, 65536):
            capture.add(chunk)
    except OSError:
        pass
    finally:
        stream.close()


def make_terminal(settings: ToolSettings) -> TerminalTool:
    return TerminalTool(settings.terminal)
