"""`memory`: durable notes, capped in size: one file per user (`<home>/memory/<platform>/<user>.md`)
or, with the shared scope, one `<home>/MEMORY.md` for every session.

Entries are blocks separated by a line holding only `§`. A snapshot goes into each agent's
system prompt when the agent is built (`memory_block`), so the prompt stays byte-stable for the
session; changes show in sessions started afterwards (and in `view` at once). Per user, the
file is the one of the user whose message the run answers (`ToolHost.user_of`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.files import atomic_write
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

SEPARATOR = "\n§\n"
FILE_NAME = "MEMORY.md"
USERS_DIR = "memory"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@-]")


class MemoryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["view", "add", "replace", "remove"] = Field(
        description="view: list the entries; add: store 'content' as a new entry; replace: "
        "put 'content' in place of the entry containing 'old_text'; remove: delete the entry "
        "containing 'old_text'."
    )
    content: str | None = Field(
        None, description="The entry's text (add, replace). One fact or preference per entry."
    )
    old_text: str | None = Field(
        None,
        description="A unique part of the entry to replace or remove (its exact wording).",
    )


class MemoryTool(ModelTool):
    name = "memory"
    description = (
        "Your notes about the user you are talking to (MEMORY.md), across their conversations: "
        "durable facts about them, their environment and preferences, lessons learned. They "
        "are shown to you at the start of their new sessions. Keep entries short; the notes "
        "are capped (about 50 KB), so replace or remove stale entries. For anything longer or "
        "to be found later by topic, use the long-term archive if you have it."
    )
    parallel_safe = False
    Args = MemoryArgs

    def __init__(self, path: Path, max_chars: int, users: Path | None = None) -> None:
        self.path = path  # the shared file
        self.max_chars = max_chars
        self.users = users  # per user: the directory of the users' files

    def _file(self, ctx: ToolContext) -> Path:
        if self.users is None:
            return self.path
        user_of = ctx.host.user_of
        user = user_of(ctx.session_key) if user_of is not None and ctx.session_key else None
        if user is None:
            raise ToolError("memory is kept per user, and no user is known in this context")
        return user_file(self.users, user)

    def call(self, args: MemoryArgs, ctx: ToolContext) -> str:
        path = self._file(ctx)
        if args.action == "view":  # writes replace the file whole: a read needs no lock
            return self._view(read_entries(path))
        with locked(path):
            entries = read_entries(path)
            if args.action in ("add", "replace") and not (args.content or "").strip():
                raise ToolError(f"'{args.action}' needs 'content'")
            content = _clean((args.content or "").strip())
            if args.action == "add":
                if content in entries:
                    return "Already remembered."
                entries.append(content)
            else:
                index = self._find(entries, args.old_text)
                if args.action == "replace":
                    entries[index] = content
                else:
                    del entries[index]
            text = SEPARATOR.join(entries)
            if len(text) > self.max_chars:
                raise ToolError(
                    f"memory would hold {len(text)} characters; the cap is {self.max_chars}. "
                    "Remove or shorten entries first (view lists them)."
                )
            atomic_write(path, (text + "\n").encode() if text else b"")
        verb = {"add": "Added", "replace": "Replaced", "remove": "Removed"}[args.action]
        return f"{verb}. Memory: {len(entries)} entries, {len(text)}/{self.max_chars} characters."

    def _view(self, entries: list[str]) -> str:
        if not entries:
            return "(memory is empty)"
        used = len(SEPARATOR.join(entries))
        body = "\n".join(f"[{i}] {e}" for i, e in enumerate(entries, 1))
        return f"{body}\n[{len(entries)} entries, {used}/{self.max_chars} characters]"

    @staticmethod
    def _find(entries: list[str], old_text: str | None) -> int:
        needle = (old_text or "").strip()
        if not needle:
            raise ToolError("'old_text' is required: a unique part of the entry")
        hits = [i for i, e in enumerate(entries) if needle in e]
        if not hits:
            raise ToolError(f"no entry contains {needle[:80]!r}; use view to see them")
        if len(hits) > 1:
            raise ToolError(f"{len(hits)} entries contain {needle[:80]!r}; quote more of one")
        return hits[0]


def _clean(content: str) -> str:
    """A line holding only the separator would split the entry in two."""
    return "\n".join("§ " if ln.strip() == "§" else ln for ln in content.split("\n"))


def read_entries(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    return [e.strip() for e in text.replace("\r\n", "\n").split(SEPARATOR) if e.strip()]


def user_file(users: Path, user: str) -> Path:
    """``users/<platform>/<user id>.md`` for ``user`` = "<platform>/<user id>"; an id that is
    not a plain file name gets a readable part and a hash of the whole (never a path)."""
    platform, _, uid = user.partition("/")
    parts = []
    for raw in (platform, uid):
        safe = _UNSAFE.sub("_", raw).lstrip(".")[:64]
        if safe != raw or not safe:
            safe = f"{safe}~{hashlib.sha256(raw.encode()).hexdigest()[:12]}"
        parts.append(safe)
    return users / parts[0] / f"{parts[1]}.md"


def memory_file(home: Path, user: str | None, per_user: bool) -> Path | None:
    """The memory file a session sees: the shared one, its user's, or None (a session several
    users share gets no one's notes in its prompt)."""
    if not per_user:
        return home / FILE_NAME
    return None if user is None else user_file(home / USERS_DIR, user)


def memory_block(home: Path, max_chars: int = 50_000, path: Path | None = None) -> str:
    """The memory as a system prompt section ('' when there is none); ``path`` defaults to
    the shared file."""
    entries = read_entries(path or home / FILE_NAME)
    if not entries:
        return ""
    text = "\n".join(f"- {e}" for e in entries)[:max_chars]
    return (
        "Your memory (MEMORY.md, from earlier conversations; update it with the memory tool):\n"
        + text
    )


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One writer of ``path`` at a time across threads, agents and processes.

    The lock is on the note's directory, not on a file beside the note: a lock file would stay
    behind for good, and the note itself is replaced whole on each write (a lock on it would
    be on the old file). A user's notes share their platform's directory, so writers of one
    platform take turns; each holds it for one small read and write.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # a `<note>.lock` left by an older version would otherwise stay for good
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.with_name(path.name + ".lock"))
        yield
    finally:
        os.close(fd)  # closing releases the lock


def make_memory(settings: ToolSettings) -> MemoryTool:
    from tools.catalog import require_home

    home = require_home(settings, "memory")
    users = home / USERS_DIR if settings.memory_scope == "user" else None
    return MemoryTool(home / FILE_NAME, settings.memory_max_chars, users)
