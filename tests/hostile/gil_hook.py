"""A deliberately bad user hook for the GIL-freeze tests: a pool thread runs a catastrophic
regex, one C call that holds the GIL for minutes (the loop and the watchdog thread starve)."""

from __future__ import annotations

import asyncio
import os
import re
import time

from hermes_gateway.core.bus import LifecycleEvent


def backtrack_for_minutes() -> object:
    return re.match(r"(a+)+$", "a" * 34 + "!")  # 2^34 steps in sre, never releasing the GIL


def busy_python_for(seconds: float) -> None:
    """Pure-Python work: it hands the GIL over every switch interval, the loop keeps up."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


async def hold_the_gil(event: LifecycleEvent) -> None:
    """`hold the gil MARKER`: only while the marker file exists (removed here), so the message
    replayed after the restart does not freeze the gateway again. `busy python SECONDS`: a
    pool thread busy in Python, which is not a freeze."""
    if event.message is not None and event.message.text.startswith("busy python "):
        seconds = float(event.message.text.split()[-1])
        asyncio.get_running_loop().run_in_executor(None, busy_python_for, seconds)
        return
    if event.message is None or not event.message.text.startswith("hold the gil "):
        return
    try:
        os.remove(event.message.text.split(maxsplit=3)[3])
    except OSError:
        return
    asyncio.get_running_loop().run_in_executor(None, backtrack_for_minutes)


hold_the_gil.events = ["message_received"]  # type: ignore[attr-defined]
