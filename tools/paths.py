"""Workspace confinement: every path a model hands a tool is normalized and kept inside it,
and only regular files are opened (a FIFO or device would block a worker for good)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tools.errors import ToolError


def resolve_in_workspace(workspace: Path, raw: str) -> Path:
    """Strip, resolve relative to ``workspace`` and refuse anything that lands outside it.

    Models send paths with stray whitespace, quotes, absolute prefixes and ``..``; symlinks are
    resolved first, so a link pointing out of the workspace is refused too.
    """
    cleaned = raw.strip().strip("'\"`").strip()
    if not cleaned:
        raise ToolError("path is empty")
    if "\x00" in cleaned:
        raise ToolError("path contains a NUL byte")
    root = workspace.resolve()
    try:
        candidate = Path(cleaned).expanduser()
        if not candidate.is_absolute():
            candidate = root / candidate
        resolved = _resolve_strictly(candidate)
    except (OSError, RuntimeError) as exc:  # ~nobody, a symlink loop, a name too long
        raise ToolError(f"path {cleaned!r} cannot be resolved: {exc.__class__.__name__}") from None
    if resolved != root and root not in resolved.parents:
        raise ToolError(
            f"path {cleaned!r} is outside the workspace; use a path relative to the workspace"
        )
    return resolved


def _resolve_strictly(candidate: Path) -> Path:
    """Every symlink followed, or an error. A lenient `resolve()` stops at a symlink loop and
    leaves the rest as written: ``loop/../link_out`` then looked inside the workspace while
    ``link_out`` still pointed out of it (fuzzing). ``..`` is applied to the path as
    written; what does not exist yet resolves through its deepest existing directory, and no
    dangling symlink is let through (writing to one would create its target)."""
    path = Path(os.path.normpath(candidate))
    missing: list[str] = []
    while True:
        try:
            return path.resolve(strict=True).joinpath(*reversed(missing))
        except FileNotFoundError:
            if path.is_symlink():
                raise FileNotFoundError(f"{path} is a dangling symlink") from None
            if path.parent == path:
                raise
            missing.append(path.name)
            path = path.parent


def open_regular(path: Path, flags: int, shown: str) -> int:
    """A descriptor on the regular file ``path`` (already resolved), or a `ToolError`.

    Opened with O_NONBLOCK, so a FIFO or device cannot block the call, and O_NOFOLLOW, so a
    link swapped in after resolving is not followed; the type is checked on the descriptor.
    """
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ToolError(f"file {shown!r} does not exist") from None
    except IsADirectoryError:
        raise ToolError(f"{shown!r} is a directory, not a file") from None
    except OSError as exc:  # ENXIO (a socket), ELOOP (a link swapped in), EACCES...
        refuse_special(path, shown)
        raise ToolError(f"{shown!r} cannot be opened: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise ToolError(f"{shown!r} is a directory, not a file")
        raise ToolError(f"{shown!r} is {_kind(mode)}, not a regular file; file tools refuse it")
    os.set_blocking(fd, True)
    return fd


def read_regular(path: Path, limit: int, shown: str) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` (see `open_regular`)."""
    fd = open_regular(path, os.O_RDONLY, shown)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit)


def refuse_special(path: Path, shown: str) -> None:
    """A `ToolError` when ``path`` exists and is not a regular file (nor a directory, which
    callers name themselves): writing over a FIFO or device is never what a model wants."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ToolError(f"{shown!r} is {_kind(mode)}, not a regular file; file tools refuse it")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"
