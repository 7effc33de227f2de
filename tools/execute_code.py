"""`execute_code`: the model writes one Python script that calls the agent's tools itself, so a
chore of many calls costs one model round trip and only what the script prints comes back.

The script runs with the gateway's Python in the tools' sandbox, confined like `terminal`
(workspace as cwd, allow-listed environment, its own process group or namespace, kernel limits,
a wall-clock timeout); its `hermes_tools` functions are served by `tools.code_bridge`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from tools import memory_group, sandbox, sandbox_procs
from tools.approval import approve
from tools.code_bridge import Bridge
from tools.code_output import Stdout, Tail
from tools.errors import ToolError
from tools.host import ApprovalRequest
from tools.inline_code import code_reason
from tools.registry import ToolContext, ToolRegistry, _clean_schema

if TYPE_CHECKING:
    from tools.catalog import CodeSettings, TerminalSettings, ToolSettings

# what a script may call: tools that act on the workspace or the web, never the agent itself
SCRIPT_TOOLS = (
    "read_file",
    "write_file",
    "search_files",
    "patch",
    "web_search",
    "web_extract",
    "terminal",
)
MAX_CODE_CHARS = 100_000
_LIB = Path(__file__).resolve().parent / "scriptlib"
# argv: the directory holding hermes_tools, then the socket's descriptor
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import hermes_tools; "
    "hermes_tools._main(int(sys.argv.pop(1)))"
)
_POLL_S = 0.05
_COUNT_EVERY_S = 0.1
_NICE = 10
_STDERR_TAIL = 2000
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_TOOL_CALL = re.compile(r"\b(" + "|".join(SCRIPT_TOOLS) + r")\s*\(")


class ExecuteCodeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        description="A complete Python 3 script. Import the tool functions from hermes_tools; "
        "print() what you need to see (only stdout comes back).",
        min_length=1,
        max_length=MAX_CODE_CHARS,
    )


class ExecuteCodeTool:
    name = "execute_code"
    parallel_safe = False

    def __init__(
        self, settings: CodeSettings, terminal: TerminalSettings, tools: ToolRegistry
    ) -> None:
        self.settings = settings
        self.terminal = terminal
        self.tools = tools
        self.description = describe(tools, settings, terminal.approval != "off")

    def narrowed(self, names: list[str]) -> ExecuteCodeTool:
        """This tool for a registry of only `names` (a sub-agent's): its scripts may call no
        tool the registry does not hold."""
        return ExecuteCodeTool(self.settings, self.terminal, self.tools.subset(names))

    def parameters(self) -> dict[str, Any]:
        return _clean_schema(ExecuteCodeArgs.model_json_schema())

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        args = ExecuteCodeArgs.model_validate(arguments)
        ctx.workspace.mkdir(parents=True, exist_ok=True)
        self._approve(args.code, ctx)
        return Script(self, args.code, ctx).run()

    def _approve(self, code: str, ctx: ToolContext) -> None:
        """The script may do directly what `terminal` would ask about: screened the same way
        (its own tool calls are asked about one by one when they run, so they are left out)."""
        policy = self.terminal.approval
        if policy == "off":
            return
        reason = code_reason("python3", _TOOL_CALL.sub("call(", code), False)
        if policy == "always" or reason:
            request = ApprovalRequest(
                ctx.session_key, self.name, code, reason or "every command is asked"
            )
            try:
                refusal = approve(ctx.host, request, ctx.should_stop)
            except ToolError as exc:  # the host cannot ask here
                refusal = str(exc)
            if refusal:
                raise ToolError(refusal.replace("command", "script"))


class Script:
    """One run of a script: spawn, watch, kill, report."""

    def __init__(self, tool: ExecuteCodeTool, code: str, ctx: ToolContext) -> None:
        self.tool, self.code, self.ctx = tool, code, ctx
        s = tool.settings
        # room is left for the footer and a stderr tail within what the registry lets through
        keep = max(100, min(s.max_stdout_chars, ctx.max_output_chars - _STDERR_TAIL - 500))
        self.stdout = Stdout(ctx.workspace, keep, s.spill_max_bytes)
        self.stderr = Tail(_STDERR_TAIL)
        self.bridge = Bridge(tool.tools, ctx, s.max_calls)
        self.started = time.monotonic()

    def run(self) -> str:
        s = self.tool.settings
        try:
            # one bound for the script and all it starts (RLIMIT_AS is only per process)
            group = memory_group.open_group(s.memory_mb * 1024 * 1024)
        except BaseException:
            self.bridge.close()
            raise
        try:
            return self._run(group, s)
        finally:
            group.close()

    def _run(self, group: memory_group.MemoryGroup, s: CodeSettings) -> str:
        try:
            child = self._spawn(group)
        except BaseException:
            self.bridge.close()
            raise
        readers = [
            _reader(child.stdout, self.stdout.add, "hermes-code-out"),
            _reader(child.stderr, self.stderr.add, "hermes-code-err"),
        ]
        self.bridge.start({"code": self.code, "tools": _signatures(self.tool.tools)})
        try:
            ended = self._watch(child, group)
        finally:
            group.kill()
            child.kill()  # also after a normal exit: what it left running goes too
            self.bridge.close()
        if group.exceeded(()) and ended is None:
            ended = _over_memory(s)
        for reader in readers:
            reader.join(2.0)
        self.stdout.close()
        return self._report(ended, child.returncode, s)

    def _spawn(self, group: memory_group.MemoryGroup) -> sandbox.Sandboxed:
        s, ws = self.tool.settings, self.ctx.workspace
        env = {
            "PATH": _DEFAULT_PATH,
            **self.tool.terminal.env,
            "HOME": str(ws),
            "PYTHONIOENCODING": "utf-8",
        }
        limits = sandbox.Limits(
            cpu_s=int(s.timeout_s) + 5,
            memory_bytes=s.memory_mb * 1024 * 1024,
            open_files=s.open_files,
            processes=s.max_processes,
            memory_group=group.path,
        )
        # a lower priority: a script spinning (or forking) does not crowd out the gateway
        nice = ["nice", "-n", str(_NICE)] if shutil.which("nice") else []
        # -P: the workspace goes last on the import path (hermes_tools puts it there), so a
        # file in it named like a standard module cannot break the script's start
        boot = [sys.executable, "-B", "-P", "-c", _BOOT, str(_LIB), str(self.bridge.child_fd)]
        argv = [*nice, *boot]
        return sandbox.spawn(
            argv,
            cwd=ws,
            workspace=ws,
            env=env,
            limits=limits,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(self.bridge.child_fd,),
        )

    def _watch(self, child: sandbox.Sandboxed, group: memory_group.MemoryGroup) -> str | None:
        """None when the script exited by itself, else why it is to be killed."""
        s = self.tool.settings
        counted = 0.0
        while child.poll() is None:
            now = time.monotonic()
            if self.ctx.should_stop():
                return "interrupted by the user; the script was killed"
            if now - self.started > s.timeout_s:
                return f"timed out after {s.timeout_s:g} s; the script was killed"
            if self.stdout.flooded:
                return f"printed more than {s.spill_max_bytes} bytes; the script was killed"
            if now - counted > _COUNT_EVERY_S:
                # the backstop for the process limit, which the kernel does not apply to root
                counted = now
                procs = sandbox_procs.descendants(child.pid)
                if len(procs) > s.max_processes:
                    return f"started more than {s.max_processes} processes; the script was killed"
                if group.exceeded([child.pid, *procs]):
                    return _over_memory(s)
            time.sleep(_POLL_S)
        return None

    def _report(self, ended: str | None, code: int | None, s: CodeSettings) -> str:
        calls = self.bridge.calls
        made = ", ".join(f"{n} x{c}" for n, c in calls.items()) if calls else "none"
        refused = f", {self.bridge.refused} refused over the limit" if self.bridge.refused else ""
        seconds = time.monotonic() - self.started
        footer = f"[exit code {code}, {seconds:.1f} s, tool calls: {made}{refused}]"
        out = self.stdout.text().rstrip("\n")
        if ended is None and code == 0:
            return f"{out}\n{footer}" if out else f"(nothing printed)\n{footer}"
        why = ended or _failure(code, s)
        parts = [why]
        if out:
            parts.append(f"stdout:\n{out}")
        if err := self.stderr.text():
            parts.append(f"stderr (its end):\n{err}")
        raise ToolError("\n".join([*parts, footer]))


def _over_memory(s: CodeSettings) -> str:
    return (
        f"the script was killed for exceeding its memory limit of {s.memory_mb} MB (all its "
        "processes together)"
    )


def _failure(code: int | None, s: CodeSettings) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        if name == "SIGXCPU":
            return f"the script used more than {int(s.timeout_s) + 5} s of CPU and was killed"
        return f"the script was killed by {name}"
    return f"the script failed with exit code {code}"


def _reader(stream: IO[bytes] | None, sink: Callable[[bytes], None], name: str) -> threading.Thread:
    def pump() -> None:
        assert stream is not None
        try:
            while chunk := os.read(stream.fileno(), 65536):
                sink(chunk)
        except OSError:
            pass
        finally:
            stream.close()

    thread = threading.Thread(target=pump, name=name, daemon=True)
    thread.start()
    return thread


def _signatures(tools: ToolRegistry) -> dict[str, dict[str, Any]]:
    """Each script tool's parameter names in order (for positional arguments) and its doc."""
    found = {}
    for name in tools.names:
        tool = tools.get(name)
        assert tool is not None
        params = list(tool.parameters().get("properties", {}))
        found[name] = {"params": params, "doc": tool.description}
    return found


def _signature(name: str, schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    params = [p if p in required else f"{p}=..." for p in schema.get("properties", {})]
    return f"{name}({', '.join(params)})"


def describe(tools: ToolRegistry, settings: CodeSettings, screened: bool) -> str:
    """The tool's description, naming the functions this session's scripts can call."""
    listed = [_signature(n, t.parameters()) for n in tools.names if (t := tools.get(n))]
    if listed:
        offer = (
            "Scripts call tools with `from hermes_tools import ...`; available here: "
            + "; ".join(listed)
            + ". Each returns the tool's text output and raises hermes_tools.ToolError when "
            "the tool refuses (bad arguments, outside the workspace, not approved)."
        )
    else:
        offer = "No tools can be called from scripts in this session."
    if screened:
        offer += (
            " A script that itself writes files, deletes, or starts programs (open(..., 'w'), "
            "subprocess, os.system) needs the user's approval first, like a terminal command; "
            "use the tool functions instead where you can."
        )
    return (
        "Run a Python 3 script in the workspace and get back what it printed on stdout (on "
        "failure also the end of stderr). Use it for chores of 3 or more tool calls with logic "
        "between them (loops, filtering, summing up): one call instead of many, and only the "
        f"printed result enters the conversation. {offer} Limits: {settings.timeout_s:g} s, "
        f"{settings.max_calls} tool calls, {settings.max_stdout_chars} characters of stdout "
        "(the rest is saved to a file in the workspace)."
    )


def make_execute_code(settings: ToolSettings, tools: ToolRegistry | None = None) -> ExecuteCodeTool:
    """`tools`: the session's other tools; those in `SCRIPT_TOOLS` are offered to scripts."""
    offered = tools.subset(SCRIPT_TOOLS) if tools is not None else ToolRegistry()
    return ExecuteCodeTool(settings.code, settings.terminal, offered)
