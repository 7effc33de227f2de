"""The workspace walk, glob listing and line grep behind `search_files`, standard library only.

It runs as a child process (`python -I -S tools/search_walk.py SPEC`): the model's pattern
and glob are compiled here, never in the gateway, because compiling a pattern of many Unicode
classes, or running a backtracking one, holds the GIL and would stop every thread of the
gateway. Only regular files are opened, never blocking.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import sys
import time
from pathlib import Path

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv"})
MAX_FILE_BYTES = 5 * 1024 * 1024
LINE_CHARS = 300
BAD_PATTERN = 3  # the exit status when the pattern does not compile; why is on stderr


def matches_glob(rel: str, glob: str | None) -> bool:
    if not glob:
        return True
    if "/" in glob:
        return fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(rel, glob.replace("**/", ""))
    return fnmatch.fnmatch(rel.rsplit("/", 1)[-1], glob)


def walk(root: Path, base: Path, deadline: float) -> list[tuple[Path, str]]:
    """Regular files under ``base`` as (path, path relative to the workspace), sorted.

    Links are followed only to a regular file inside the workspace; a FIFO, socket or device
    (which would block or never end when read) and a symlink loop are skipped.
    """
    out: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if time.monotonic() > deadline:
            break
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if _regular_inside(root, path):
                out.append((path, path.relative_to(root).as_posix()))
    return sorted(out, key=lambda item: item[1].split("/"))  # the order `rg --sort path` has


def _regular_inside(root: Path, path: Path) -> bool:
    try:
        if path.is_symlink():
            target = path.resolve(strict=True)
            if target != root and root not in target.parents:
                return False  # a link out of the workspace is not followed
        return stat.S_ISREG(path.stat().st_mode)
    except (OSError, RuntimeError):  # a dangling link, a loop (RuntimeError before 3.13)
        return False


def read_regular(path: Path, limit: int) -> bytes | None:
    """At most ``limit`` bytes of ``path``, or None when it is not a regular file (checked on
    the open descriptor: a file swapped for a FIFO after the walk does not block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def grep(
    root: Path, base: Path, regex: re.Pattern[str], glob: str | None, limit: int, budget_s: float
) -> list[str]:
    """Matching lines as 'path:line: text', at most ``limit``, within ``budget_s`` (then
    the lines found so far)."""
    deadline = time.monotonic() + budget_s
    found: list[str] = []
    for path, rel in walk(root, base, deadline):
        if not matches_glob(rel, glob):
            continue
        data = read_regular(path, MAX_FILE_BYTES)
        if data is None or b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                found.append(f"{rel}:{number}: {line[:LINE_CHARS]}")
                if len(found) >= limit:
                    return found
        if time.monotonic() > deadline:
            break
    return found


def list_files(root: Path, base: Path, glob: str, limit: int, budget_s: float) -> list[str]:
    """Files matching ``glob``, at most ``limit``, walking for at most ``budget_s``."""
    files = walk(root, base, time.monotonic() + budget_s)
    return [rel for _path, rel in files if matches_glob(rel, glob)][:limit]


def compiled(pattern: str, case_sensitive: bool) -> re.Pattern[str]:
    """The model's pattern compiled; a `ValueError` whose message is for the model."""
    try:
        return re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
    except (RecursionError, OverflowError, MemoryError):  # nested too deep, too large
        raise ValueError("pattern is too large or too deeply nested to compile") from None


def main(argv: list[str]) -> int:
    """The child: one JSON spec in argv[1]; the lines found (no pattern: the files matching
    the glob), one JSON string a line, out."""
    spec = json.loads(argv[1])
    root, base = Path(spec["root"]), Path(spec["base"])
    limit, budget_s = spec["limit"], spec["budget_s"]
    if spec["pattern"] is None:
        lines = list_files(root, base, spec["glob"], limit, budget_s)
    else:
        try:
            regex = compiled(spec["pattern"], spec["case_sensitive"])
        except ValueError as exc:
            sys.stderr.write(f"{exc}\n")
            return BAD_PATTERN
        lines = grep(root, base, regex, spec["glob"], limit, budget_s)
    sys.stdout.write("".join(json.dumps(line) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
