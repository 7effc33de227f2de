"""File tools confined to the workspace: `read_file` (line ranges, size caps) and `write_file`
(size-capped). Both open regular files only, never blocking on a FIFO or device."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.paths import open_regular, read_regular, refuse_special, resolve_in_workspace
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

_MAX_READ_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_WRITE_BYTES = 1024 * 1024


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="File path relative to the workspace root, e.g. 'notes/todo.md'.",
        min_length=1,
    )
    start_line: int = Field(1, ge=1, description="First line to return, 1-based. Default 1.")
    max_lines: int = Field(
        400, ge=1, le=5000, description="How many lines to return at most. Default 400."
    )


class ReadFileTool(ModelTool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file from the workspace. Returns numbered lines "
        "('<n>| <text>'), starting at start_line, at most max_lines of them, and says when "
        "more lines follow."
    )
    parallel_safe = True
    Args = ReadFileArgs

    def call(self, args: ReadFileArgs, ctx: ToolContext) -> str:
        path = resolve_in_workspace(ctx.workspace, args.path)
        data = read_regular(path, _MAX_READ_BYTES + 1, args.path.strip())
        if b"\x00" in data[:8192]:
            raise ToolError(f"{args.path.strip()!r} looks like a binary file")
        text = data[:_MAX_READ_BYTES].decode("utf-8", errors="replace")
        lines = text.splitlines()
        if not lines:
            return "(empty file)"
        first = args.start_line - 1
        if first >= len(lines):
            raise ToolError(f"start_line {args.start_line} is past the end ({len(lines)} lines)")
        chunk = lines[first : first + args.max_lines]
        body = "\n".join(f"{first + i + 1}| {line}" for i, line in enumerate(chunk))
        remaining = len(lines) - (first + len(chunk))
        if remaining > 0:
            body += f"\n[{remaining} more lines; continue with start_line={first + len(chunk) + 1}]"
        if len(data) > _MAX_READ_BYTES:
            body += f"\n[file larger than {_MAX_READ_BYTES} bytes: only the start was read]"
        return body


class WriteFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        description="File path relative to the workspace root, e.g. 'src/app.py'. Missing "
        "parent directories are created.",
        min_length=1,
    )
    content: str = Field(description="The complete text to write (UTF-8).")
    mode: Literal["overwrite", "append"] = Field(
        "overwrite",
        description="'overwrite' replaces the file (default); 'append' adds to its end.",
    )


class WriteFileTool(ModelTool):
    name = "write_file"
    description = (
        "Create or overwrite a UTF-8 text file in the workspace (or append to it with "
        "mode='append'). To change part of an existing file, use patch instead."
    )
    parallel_safe = False
    Args = WriteFileArgs

    def __init__(self, max_bytes: int = DEFAULT_MAX_WRITE_BYTES) -> None:
        self.max_bytes = max_bytes

    def call(self, args: WriteFileArgs, ctx: ToolContext) -> str:
        path = resolve_in_workspace(ctx.workspace, args.path)
        shown = args.path.strip()
        if path.is_dir():
            raise ToolError(f"{shown!r} is a directory, not a file")
        refuse_special(path, shown)
        data = args.content.encode("utf-8", errors="surrogatepass")
        if len(data) > self.max_bytes:
            raise ToolError(
                f"content is {len(data)} bytes; write_file writes at most {self.max_bytes} "
                "bytes in one call"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        if args.mode == "append" and path.exists():
            with os.fdopen(open_regular(path, os.O_WRONLY | os.O_APPEND, shown), "ab") as fh:
                fh.write(data)
            verb = "Appended"
        else:
            existed = path.exists()
            atomic_write(path, data)
            verb = "Overwrote" if existed else "Created"
        lines = args.content.count("\n") + (0 if args.content.endswith("\n") else 1)
        return f"{verb} {shown} ({len(data)} bytes, {lines if args.content else 0} lines)."


def atomic_write(path: Path, data: bytes) -> None:
    """Write through a temporary file and a rename: a reader never sees half a file, and a
    crash leaves the old one. The old file's permissions are kept (a new file gets 0644)."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_read_file(settings: ToolSettings) -> ReadFileTool:
    return ReadFileTool()


def make_write_file(settings: ToolSettings) -> WriteFileTool:
    return WriteFileTool(settings.max_write_bytes)
