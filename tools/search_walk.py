"""The workspace walk and line grep behind `search_files`, standard library only.

`tools.search` lists files with `walk` in-process; the regex grep runs in a child process
(`python -I tools/search_walk.py SPEC`), because a backtracking pattern holds the GIL and
would stop every thread of the gateway. Only regular files are opened, never blocking.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

SKIP_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv"})
MAX_FILE_BYTES = 5 * 1024 * 1024
LINE_CHARS = 300


def matches_glob(rel: str, glob: str | None) -> bool:
    if not glob:
        return True
    if "/" in glob:
        return fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(rel, glob.replace("**/", ""))
    return fnmatch.fnmatch(rel.rsplit("/", 1)[-1], glob)


def walk(
    root: Path, base: Path, deadline: float, should_stop: Callable[[], bool] = lambda: False
) -> list[tuple[Path, str]]:
    """Regular files under ``base`` as (path, path relative to the workspace), sorted.

    Links are followed only to a regular file inside the workspace; a FIFO, socket or device
    (which would block or never end when read) and a symlink loop are skipped.
    """
    out: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        if should_stop() or time.monotonic() > deadline:
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


def main(argv: list[str]) -> int:
    """The child: one JSON spec in argv[1]; the lines found, one JSON string a line, out."""
    spec = json.loads(argv[1])
    regex = re.compile(spec["pattern"], 0 if spec["case_sensitive"] else re.IGNORECASE)
    root, base = Path(spec["root"]), Path(spec["base"])
    lines = grep(root, base, regex, spec["glob"], spec["limit"], spec["budget_s"])
    sys.stdout.write("".join(json.dumps(line) + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
