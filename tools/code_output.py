"""An `execute_code` script's output: stdout kept up to what the model may read, the whole of it
spilled to a file in the workspace past that (up to a hard cap, past which the script is
killed), and a short tail of stderr for when it fails.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from pathlib import Path

SPILL_DIR = ".execute_code"
_KEEP_FILES = 20


class Stdout:
    """Fed by the reader thread; read once the script is over."""

    def __init__(self, workspace: Path, keep: int, cap: int) -> None:
        self.workspace = workspace
        self.keep = keep  # bytes the model is shown
        self.cap = cap
        self.head = bytearray()
        self.total = 0
        self.spilled: str | None = None  # the spill file, relative to the workspace
        self.flooded = False  # more than `cap` bytes: the script is to be killed
        self._fd: int | None = None

    def add(self, chunk: bytes) -> None:
        room = self.cap - self.total
        self.total += len(chunk)
        if room < len(chunk):
            self.flooded = True
            chunk = chunk[: max(room, 0)]
        if self._fd is None and self.spilled is None:
            self.head += chunk
            if len(self.head) > self.keep:
                self._open_spill()
        elif self._fd is not None and chunk:
            os.write(self._fd, chunk)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open_spill(self) -> None:
        name = time.strftime("output-%Y%m%d-%H%M%S-") + secrets.token_hex(3) + ".txt"
        try:
            self._fd = _create(self.workspace, name)
            os.write(self._fd, bytes(self.head))
            self.spilled = f"{SPILL_DIR}/{name}"
        except OSError:
            self.spilled = ""  # no file: the model gets the start only
        del self.head[self.keep :]

    def text(self) -> str:
        """What the model reads: the output, or its first `keep` bytes and where the rest is."""
        text = self.head.decode("utf-8", "replace")
        if self.spilled is None:
            return text
        if not self.spilled:
            where = "the rest could not be saved"
        elif self.flooded:
            where = f"its first {self.cap} bytes are in {self.spilled}"
        else:
            where = f"all of it is in {self.spilled} (read_file and search_files read it)"
        return f"{text}\n[stdout cut at {len(self.head)} of {self.total} bytes; {where}]"


def _create(workspace: Path, name: str) -> int:
    """A new file in the workspace's spill directory, opened without following any link the
    script (or a command) may have put in the way; the oldest spills beyond a few are removed."""
    root = os.open(workspace.resolve(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(SPILL_DIR, 0o755, dir_fd=root)
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        folder = os.open(SPILL_DIR, flags, dir_fd=root)
    finally:
        os.close(root)
    try:
        old = sorted(n for n in os.listdir(folder) if n.startswith("output-"))
        for stale in old[: max(0, len(old) - _KEEP_FILES + 1)]:
            with contextlib.suppress(OSError):
                os.unlink(stale, dir_fd=folder)
        write = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(name, write, 0o644, dir_fd=folder)
    finally:
        os.close(folder)


class Tail:
    """The last bytes of stderr: a traceback ends there."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        del self.data[: max(0, len(self.data) - self.size)]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace").strip()
