"""Workspace confinement: every path a model hands a tool is normalized and kept inside it."""

from __future__ import annotations

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
    candidate = Path(cleaned).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    resolved = candidate.resolve()
    if resolved != root and root not in resolved.parents:
        raise ToolError(
            f"path {cleaned!r} is outside the workspace; use a path relative to the workspace"
        )
    return resolved
