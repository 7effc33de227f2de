"""Workspace confinement: every path a model hands a tool is normalized and kept inside it."""

from __future__ import annotations

import os
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
    except (OSError, RuntimeError) as exc:  # ~nobody, a symlink loop, a name too long (issue 9)
        raise ToolError(f"path {cleaned!r} cannot be resolved: {exc.__class__.__name__}") from None
    if resolved != root and root not in resolved.parents:
        raise ToolError(
            f"path {cleaned!r} is outside the workspace; use a path relative to the workspace"
        )
    return resolved


def _resolve_strictly(candidate: Path) -> Path:
    """Every symlink followed, or an error. A lenient `resolve()` stops at a symlink loop and
    leaves the rest as written: ``loop/../link_out`` then looked inside the workspace while
    ``link_out`` still pointed out of it (issue 9, fuzzing). ``..`` is applied to the path as
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
