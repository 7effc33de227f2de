"""Loaded by a gateway child whose PYTHONPATH starts here (tests/e2e/test_start_imports.py):
with HERMES_IMPORT_AUDIT set to a file, every module first imported on a thread that is
running an event loop is written to it, one name a line (an import there stalls the loop)."""

from __future__ import annotations

import os
import sys
import threading
from asyncio import events

_PATH = os.environ.get("HERMES_IMPORT_AUDIT")


class _OnTheLoop:
    """A finder that finds nothing: it only notes imports made while a loop runs here."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.busy = threading.local()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if getattr(self.busy, "on", False) or events._get_running_loop() is None:
            return None
        self.busy.on = True
        try:
            os.write(self.fd, f"{name}\n".encode())
        finally:
            self.busy.on = False
        return None


if _PATH:
    sys.meta_path.insert(0, _OnTheLoop(os.open(_PATH, os.O_WRONLY | os.O_CREAT | os.O_APPEND)))
