"""`patch`: change part of a workspace file by search/replace edits or a unified diff.

All edits apply or none do; when a search text or a hunk's context does not match, the error
shows what the file holds there, so the model can correct itself instead of guessing. The edit
text and the patched file are size-capped; only regular files are opened.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.errors import ToolError
from tools.files import DEFAULT_MAX_WRITE_BYTES, atomic_write
from tools.paths import read_regular, resolve_in_workspace
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MAX_BYTES = 4 * 1024 * 1024


class Edit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    old: str = Field(
        description="Exact text to find, including indentation; it must occur exactly once "
        "unless replace_all is true. Include a few surrounding lines to make it unique.",
        min_length=1,
    )
    new: str = Field(description="Text to put in its place (empty to delete it).")
    replace_all: bool = Field(False, description="Replace every occurrence. Default false.")


class PatchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="File path relative to the workspace root.", min_length=1)
    edits: list[Edit] | None = Field(
        None,
        description="Search/replace edits, applied in order. Give either edits or diff.",
        min_length=1,
    )
    diff: str | None = Field(
        None,
        description="A unified diff of this one file ('@@ -l,n +l,n @@' hunks with ' ', "
        "'-' and '+' lines; '---'/'+++' headers optional). Give either edits or diff.",
        min_length=1,
    )

    @model_validator(mode="after")
    def _one_form(self) -> PatchArgs:
        if (self.edits is None) == (self.diff is None):
            raise ValueError("give exactly one of 'edits' or 'diff'")
        return self


class PatchTool(ModelTool):
    name = "patch"
    description = (
        "Change part of an existing text file in the workspace, either with search/replace "
        "edits (each 'old' text must match exactly once) or with a unified diff. Nothing is "
        "written unless every edit or hunk applies; on a mismatch the error shows the file's "
        "actual lines there. Read the file first if unsure of its exact contents."
    )
    parallel_safe = False
    Args = PatchArgs

    def __init__(self, max_bytes: int = DEFAULT_MAX_WRITE_BYTES) -> None:
        self.max_bytes = max_bytes

    def call(self, args: PatchArgs, ctx: ToolContext) -> str:
        path = resolve_in_workspace(ctx.workspace, args.path)
        shown = args.path.strip()
        if not path.exists() or path.is_dir():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise ToolError(f"{shown!r} {what}; patch changes existing files (use write_file)")
        self._check_size(args)
        raw = read_regular(path, _MAX_BYTES + 1, shown)
        if len(raw) > _MAX_BYTES or b"\x00" in raw[:8192]:
            raise ToolError(f"{shown!r} is binary or too large to patch")
        text = raw.decode("utf-8", errors="surrogateescape")
        newline = "\r\n" if "\r\n" in text else "\n"
        text = text.replace("\r\n", "\n")
        if args.edits is not None:
            result, summary = apply_edits(text, args.edits)
        else:
            assert args.diff is not None
            result, summary = apply_diff(text, args.diff)
        if len(result) > _MAX_BYTES:
            raise ToolError(f"the patched {shown!r} would exceed {_MAX_BYTES} bytes; not written")
        if result == text:
            return f"{shown}: nothing changed ({summary})."
        atomic_write(path, result.replace("\n", newline).encode("utf-8", "surrogateescape"))
        return f"Patched {shown}: {summary}."

    def _check_size(self, args: PatchArgs) -> None:
        size = len(args.diff or "") + sum(len(e.old) + len(e.new) for e in args.edits or ())
        if size > self.max_bytes:
            raise ToolError(
                f"the edits are {size} characters; patch takes at most {self.max_bytes} in one call"
            )


def apply_edits(text: str, edits: list[Edit]) -> tuple[str, str]:
    for number, edit in enumerate(edits, 1):
        old = edit.old.replace("\r\n", "\n")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"edit {number}: 'old' text not found. {_nearest(text, old)}")
        if count > 1 and not edit.replace_all:
            lines = _lines_of(text, old)
            raise ToolError(
                f"edit {number}: 'old' text occurs {count} times (at lines "
                f"{', '.join(map(str, lines[:10]))}); include more surrounding lines to make it "
                "unique, or set replace_all"
            )
        growth = count * (len(edit.new) - len(old))
        if len(text) + growth > _MAX_BYTES:  # replace_all of a short text can multiply it
            raise ToolError(f"edit {number} would make the file larger than {_MAX_BYTES} bytes")
        text = text.replace(old, edit.new.replace("\r\n", "\n"))
    return text, f"{len(edits)} edit(s) applied"


def _lines_of(text: str, needle: str) -> list[int]:
    found, start = [], 0
    while (at := text.find(needle, start)) != -1:
        found.append(text.count("\n", 0, at) + 1)
        start = at + 1
    return found


def _nearest(text: str, old: str) -> str:
    """Where the file has something like the first line of ``old``, with line numbers."""
    lines = text.split("\n")
    first = next((ln for ln in old.split("\n") if ln.strip()), old)
    stripped = [ln.strip() for ln in lines]
    close = difflib.get_close_matches(first.strip(), stripped, n=1, cutoff=0.6)
    if not close:
        return "Nothing similar is in the file; read it again before patching."
    at = stripped.index(close[0])
    span = max(3, old.count("\n") + 2)
    window = "\n".join(f"{i + 1}| {lines[i]}" for i in range(at, min(len(lines), at + span)))
    return f"The closest text is at line {at + 1} (check whitespace and exact wording):\n{window}"


def apply_diff(text: str, diff: str) -> tuple[str, str]:
    lines = text.split("\n")
    hunks = _parse_hunks(diff)
    if not hunks:
        raise ToolError("the diff has no '@@ -l,n +l,n @@' hunk")
    offset = added = 0
    for number, (header, start, old, new) in enumerate(hunks, 1):
        at = _locate(lines, old, max(0, start - 1 + offset))
        if at is None:
            raise ToolError(_mismatch(number, header, lines, old, max(0, start - 1 + offset)))
        lines[at : at + len(old)] = new
        offset = at - (start - 1) + len(new) - len(old)
        added += len(new) - len(old)
    return "\n".join(lines), f"{len(hunks)} hunk(s) applied ({added:+d} lines)"


def _parse_hunks(diff: str) -> list[tuple[str, int, list[str], list[str]]]:
    hunks: list[tuple[str, int, list[str], list[str]]] = []
    current: tuple[str, int, list[str], list[str]] | None = None
    for raw in diff.replace("\r\n", "\n").split("\n"):
        match = _HUNK.match(raw)
        if match:
            current = (raw, int(match.group(1)), [], [])
            hunks.append(current)
            continue
        if current is None or raw.startswith(("---", "+++", "\\")):
            continue
        tag, body = (raw[:1], raw[1:]) if raw else (" ", "")
        if tag == " ":
            current[2].append(body)
            current[3].append(body)
        elif tag == "-":
            current[2].append(body)
        elif tag == "+":
            current[3].append(body)
        else:
            raise ToolError(f"diff line {raw[:60]!r} does not start with ' ', '-' or '+'")
    return hunks


def _locate(lines: list[str], old: list[str], guess: int) -> int | None:
    """The position of ``old`` nearest to ``guess`` (line numbers in diffs drift)."""
    if not old:
        return min(guess, len(lines))
    n = len(old)
    candidates = sorted(range(len(lines) - n + 1), key=lambda i: abs(i - guess))
    for i in candidates:
        if lines[i : i + n] == old:
            return i
    for i in candidates:  # trailing whitespace is often lost on the way
        if [ln.rstrip() for ln in lines[i : i + n]] == [ln.rstrip() for ln in old]:
            return i
    return None


def _mismatch(number: int, header: str, lines: list[str], old: list[str], at: int) -> str:
    expected = "\n".join(f"  {ln}" for ln in old[:8])
    actual = "\n".join(f"{i + 1}| {lines[i]}" for i in range(at, min(len(lines), at + len(old))))
    return (
        f"hunk {number} ({header}) does not match the file: its context and '-' lines were "
        f"not found. Expected:\n{expected}\nThe file has at line {at + 1}:\n"
        f"{actual or '(end of file)'}"
    )


def make_patch(settings: ToolSettings) -> PatchTool:
    return PatchTool(settings.max_write_bytes)
