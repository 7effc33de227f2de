"""`search_files`: find files by glob and lines by regex in the workspace.

ripgrep does the work when it is installed (fast, skips ignored and binary files); otherwise a
pure-Python walk does the same within a time budget. Results are capped either way.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.paths import resolve_in_workspace
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv"})
_MAX_FILE_BYTES = 5 * 1024 * 1024
_LINE_CHARS = 300
_BUDGET_S = 20.0


class SearchFilesArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pattern: str | None = Field(
        None,
        description="Regular expression to search file contents for (Python/Rust syntax, e.g. "
        "'def \\\\w+_handler'). Omit it to list files matching glob instead.",
        min_length=1,
    )
    glob: str | None = Field(
        None, description="Only files whose name matches, e.g. '*.py' or 'src/**/*.ts'."
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

    def __init__(self, rg: str | None = None) -> None:
        self.rg = rg

    def call(self, args: SearchFilesArgs, ctx: ToolContext) -> str:
        base = resolve_in_workspace(ctx.workspace, args.path)
        if not base.is_dir():
            raise ToolError(f"{args.path.strip()!r} is not a directory in the workspace")
        root = ctx.workspace.resolve()
        if args.pattern is None:
            if not args.glob:
                raise ToolError("give a regex 'pattern', a 'glob', or both")
            files = list_files(root, base, args.glob, args.max_results + 1, ctx)
            return _report(files, args.max_results, "files", "no files match")
        flags = 0 if args.case_sensitive else re.IGNORECASE
        try:
            regex = re.compile(args.pattern, flags)
        except re.error as exc:
            raise ToolError(f"pattern is not a valid regular expression: {exc}") from None
        found = None
        if self.rg:
            found = _ripgrep(self.rg, root, base, args, args.max_results + 1)
        if found is None:
            found = grep(root, base, regex, args.glob, args.max_results + 1, ctx)
        return _report(found, args.max_results, "matches", "no matches")


def _report(items: list[str], cap: int, nouns: str, empty: str) -> str:
    if not items:
        return f"({empty})"
    body = "\n".join(items[:cap])
    if len(items) > cap:
        body += f"\n[only the first {cap} {nouns} shown; narrow the search]"
    return body


def _matches_glob(rel: str, glob: str | None) -> bool:
    if not glob:
        return True
    if "/" in glob:
        return fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(rel, glob.replace("**/", ""))
    return fnmatch.fnmatch(rel.rsplit("/", 1)[-1], glob)


def _walk(root: Path, base: Path, ctx: ToolContext) -> list[tuple[Path, str]]:
    """Files under ``base`` as (path, path relative to the workspace), sorted, inside it."""
    out: list[tuple[Path, str]] = []
    deadline = time.monotonic() + _BUDGET_S
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if ctx.should_stop() or time.monotonic() > deadline:
            break
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path.is_symlink():
                target = path.resolve()
                if target != root and root not in target.parents:
                    continue  # a link out of the workspace is not followed
            out.append((path, path.relative_to(root).as_posix()))
    return sorted(out, key=lambda item: item[1].split("/"))  # the order `rg --sort path` has


def list_files(root: Path, base: Path, glob: str, limit: int, ctx: ToolContext) -> list[str]:
    return [rel for _path, rel in _walk(root, base, ctx) if _matches_glob(rel, glob)][:limit]


def grep(
    root: Path, base: Path, regex: re.Pattern[str], glob: str | None, limit: int, ctx: ToolContext
) -> list[str]:
    found: list[str] = []
    for path, rel in _walk(root, base, ctx):
        if not _matches_glob(rel, glob):
            continue
        try:
            if path.stat().st_size > _MAX_FILE_BYTES:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                found.append(f"{rel}:{number}: {line[:_LINE_CHARS]}")
                if len(found) >= limit:
                    return found
        if ctx.should_stop():
            break
    return found


def _ripgrep(
    rg: str, root: Path, base: Path, args: SearchFilesArgs, limit: int
) -> list[str] | None:
    """Lines from ripgrep, or None when it cannot take this pattern (then Python searches)."""
    assert args.pattern is not None
    cmd = [rg, "--no-heading", "--line-number", "--color", "never", "--no-messages"]
    cmd += ["--sort", "path"]  # stable results (and the cap keeps the same ones)
    cmd += ["--max-filesize", str(_MAX_FILE_BYTES), "--max-columns", str(_LINE_CHARS)]
    if not args.case_sensitive:
        cmd.append("--ignore-case")
    if args.glob:
        cmd += ["--glob", args.glob]
    cmd += ["--regexp", args.pattern, "--", str(base)]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=_BUDGET_S, cwd=root, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode not in (0, 1):
        return None  # e.g. a look-around the Rust regex engine does not have
    out = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines()[:limit]:
        path, _, rest = line.partition(":")
        try:
            rel = Path(path).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        number, _, text = rest.partition(":")
        out.append(f"{rel}:{number}: {text}")
    return out


def make_search_files(settings: ToolSettings) -> SearchFilesTool:
    return SearchFilesTool(shutil.which("rg"))
