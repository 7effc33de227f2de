"""Loaded by a gateway child whose PYTHONPATH starts here (tests/e2e/test_start_imports.py):
with HERMES_IMPORT_AUDIT set to a file, every module first imported on a thread that is running
an event loop is written to it, one name a line (an import there stalls the loop); with
HERMES_IMPORT_ALL, every module first imported anywhere (what the process holds)."""

from __future__ import annotations

import os
import sys
import threading
from asyncio import events

_PATH = os.environ.get("HERMES_IMPORT_AUDIT")
_ALL = os.environ.get("HERMES_IMPORT_ALL")


def _open(path: str | None) -> int:
    return -1 if not path else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


class _Imports:
    """A finder that finds nothing: it only notes the imports asked of it (``all_fd``), and
    those made while a loop runs here (``fd``)."""

    def __init__(self, fd: int, all_fd: int) -> None:
        self.fd = fd
        self.all_fd = all_fd
        self.busy = threading.local()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if getattr(self.busy, "on", False):
            return None
        on_loop = self.fd >= 0 and events._get_running_loop() is not None
        self.busy.on = True
        try:
            for fd in (self.fd if on_loop else -1, self.all_fd):
                if fd >= 0:
                    os.write(fd, f"{name}\n".encode())
        finally:
            self.busy.on = False
        return None


if _PATH or _ALL:
    sys.meta_path.insert(0, _Imports(_open(_PATH), _open(_ALL)))
