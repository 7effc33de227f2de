"""File tools confined to the workspace: `read_file` (line ranges, size caps)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.paths import resolve_in_workspace
from tools.registry import ModelTool, ToolContext

_MAX_READ_BYTES = 2 * 1024 * 1024


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
        if not path.exists():
            raise ToolError(f"file {args.path.strip()!r} does not exist")
        if path.is_dir():
            raise ToolError(f"{args.path.strip()!r} is a directory, not a file")
        with path.open("rb") as fh:
            data = fh.read(_MAX_READ_BYTES + 1)
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
