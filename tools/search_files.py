"""`search_files`: find files by glob and lines by regex in the workspace.

ripgrep does the work when it is installed (fast, skips ignored and binary files); otherwise a
pure-Python walk does the same. Either way the model's pattern, and its glob (which `fnmatch`
makes a regex), are compiled and run only in a child process killed at a time limit or on a
stop: compiling a pattern of many Unicode classes, or running a backtracking one, holds the
gateway's GIL for seconds. Results are capped either way.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from tools import search_walk
from tools.child import ChildResult, run_child
from tools.errors import ToolError
from tools.paths import resolve_in_workspace
from tools.registry import ModelTool, ToolContext
from tools.search_walk import BAD_PATTERN, LINE_CHARS, MAX_FILE_BYTES

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

DEFAULT_TIMEOUT_S = 20.0
_WORKER = Path(search_walk.__file__).resolve()


class SearchFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str | None = Field(
        None,
        description="Regular expression to search file contents for (Python/Rust syntax, e.g. "
        "'def \\\\w+_handler'). Omit it to list files matching glob instead.",
        min_length=1,
        max_length=10_000,  # it travels to the search child in its argv
    )
    glob: str | None = Field(
        None,
        description="Only files whose name matches, e.g. '*.py' or 'src/**/*.ts'.",
        max_length=10_000,
    )
    path: str = Field(".", description="Directory to search, relative to the workspace root.")
    case_sensitive: bool = Field(True, description="Match case exactly. Default true.")
    max_results: int = Field(50, ge=1, le=500, description="Most lines or files returned.")


class SearchFilesTool(ModelTool):
    name = "search_files"
    description = (
        "Search the workspace: with 'pattern', returns matching lines as 'path:line: text'; "
        "without it, lists files matching 'glob'. Hidden and dependency directories (.git, "
        "node_modules, ...) and binary files are skipped. Results are capped at max_results."
    )
    parallel_safe = True
    Args = SearchFilesArgs

    def __init__(self, rg: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.rg = rg
        self.timeout_s = timeout_s

    def call(self, args: SearchFilesArgs, ctx: ToolContext) -> str:
        base = resolve_in_workspace(ctx.workspace, args.path)
        if not base.is_dir():
            raise ToolError(f"{args.path.strip()!r} is not a directory in the workspace")
        root = ctx.workspace.resolve()
        if args.pattern is None:
            if not args.glob:
                raise ToolError("give a regex 'pattern', a 'glob', or both")
            files = self._walker(root, base, args, ctx)
            return _report(files, args.max_results, "files", "no files match")
        # the pattern is compiled by ripgrep, else by the Python child, which says what is
        # wrong with it: never here
        found = None
        if self.rg:
            found = self._ripgrep(root, base, args, ctx)
        if found is None:
            found = self._walker(root, base, args, ctx)
        return _report(found, args.max_results, "matches", "no matches")

    def _ripgrep(
        self, root: Path, base: Path, args: SearchFilesArgs, ctx: ToolContext
    ) -> list[str] | None:
        """Lines from ripgrep, or None when it cannot take this pattern (then Python
        searches)."""
        assert self.rg is not None
        result = self._run([self.rg, *ripgrep_args(args, base)], root, ctx)
        if result.returncode not in (0, 1) and not result.truncated:
            return None  # e.g. a look-around the Rust regex engine does not have
        lines = result.stdout.decode("utf-8", "replace").splitlines()
        if result.truncated:
            lines = lines[:-1]  # cut mid-line by the output cap
        return [line for line in map(_relative(root), lines[: args.max_results + 1]) if line]

    def _walker(self, root: Path, base: Path, args: SearchFilesArgs, ctx: ToolContext) -> list[str]:
        """The Python walk in a child: lines matching the pattern, or (no pattern) the files
        matching the glob."""
        spec = {
            "root": str(root),
            "base": str(base),
            "pattern": args.pattern,
            "case_sensitive": args.case_sensitive,
            "glob": args.glob,
            "limit": args.max_results + 1,
            "budget_s": self.timeout_s * 0.75,  # then the lines so far, before the kill
        }
        # -I: nothing in the workspace (the child's cwd) can shadow a module; -S: the worker
        # needs the standard library only, and skipping `site` halves its start-up
        argv = [sys.executable, "-I", "-S", str(_WORKER), json.dumps(spec)]
        result = self._run(argv, root, ctx)
        if result.returncode != 0:
            tail = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            if result.returncode == BAD_PATTERN and tail:
                raise ToolError(tail[0])
            raise ToolError(f"the search failed: {tail[0] if tail else result.returncode}")
        return [json.loads(line) for line in result.stdout.decode("utf-8").splitlines()]

    def _run(self, argv: list[str], root: Path, ctx: ToolContext) -> ChildResult:
        result = run_child(argv, cwd=root, timeout_s=self.timeout_s, should_stop=ctx.should_stop)
        if result.timed_out:
            raise ToolError(
                f"the search took longer than {self.timeout_s:g} s and was stopped; simplify "
                "the pattern (nested repeats like '(a+)+' backtrack) or narrow 'path'/'glob'"
            )
        if result.stopped:
            raise ToolError("the search was stopped")
        return result


def _report(items: list[str], cap: int, nouns: str, empty: str) -> str:
    if not items:
        return f"({empty})"
    body = "\n".join(items[:cap])
    if len(items) > cap:
        body += f"\n[only the first {cap} {nouns} shown; narrow the search]"
    return body


def ripgrep_args(args: SearchFilesArgs, base: Path) -> list[str]:
    assert args.pattern is not None
    cmd = ["--no-heading", "--line-number", "--color", "never", "--no-messages"]
    cmd += ["--sort", "path"]  # stable results (and the cap keeps the same ones)
    cmd += ["--max-filesize", str(MAX_FILE_BYTES), "--max-columns", str(LINE_CHARS)]
    if not args.case_sensitive:
        cmd.append("--ignore-case")
    if args.glob:
        cmd += ["--glob", args.glob]
    return [*cmd, "--regexp", args.pattern, "--", str(base)]


def _relative(root: Path) -> Callable[[str], str]:
    """'path:line:text' from ripgrep as 'relative/path:line: text' ('' for a path outside)."""

    def convert(line: str) -> str:
        path, _, rest = line.partition(":")
        try:
            rel = Path(path).resolve().relative_to(root).as_posix()
        except (ValueError, OSError, RuntimeError):
            return ""
        number, _, text = rest.partition(":")
        return f"{rel}:{number}: {text}"

    return convert


def make_search_files(settings: ToolSettings) -> SearchFilesTool:
    return SearchFilesTool(shutil.which("rg"), settings.search_timeout_s)
