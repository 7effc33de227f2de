"""The daemon start's imports that wait on OpenSSL rather than on the interpreter, begun on a
thread the moment `hermes gateway run` starts, so they overlap the main thread's imports."""

from __future__ import annotations

import importlib
import threading

# aiohttp builds two TLS contexts as it is imported (its verified and unverified defaults):
# each reads and parses the system's CA bundle, 50-100 ms in OpenSSL with the GIL released.
# Every start needs aiohttp (the control server), so that work can run beside the imports of
# pydantic, SQLAlchemy and the gateway's modules instead of after them.
WARM = ("aiohttp",)


def _import_all() -> None:
    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:  # the main thread's own import of it raises it again, where it counts
            continue


def warm_imports() -> threading.Thread:
    """Start importing `WARM` on a daemon thread; the main thread's import of the same module
    waits for this one (Python's per-module import lock), so nothing is imported twice."""
    thread = threading.Thread(target=_import_all, name="warm-imports", daemon=True)
    thread.start()
    return thread
