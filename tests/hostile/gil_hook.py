"""A deliberately bad user hook for the GIL-freeze tests: a pool thread runs a catastrophic
regex, one C call that holds the GIL for minutes (the loop and the watchdog thread starve)."""

from __future__ import annotations

import asyncio
import os
import re

from hermes_gateway.bus import LifecycleEvent


def backtrack_for_minutes() -> object:
    return re.match(r"(a+)+$", "a" * 34 + "!")  # 2^34 steps in sre, never releasing the GIL


async def hold_the_gil(event: LifecycleEvent) -> None:
    """`hold the gil MARKER`: only while the marker file exists (removed here), so the message
    replayed after the restart does not freeze the gateway again."""
    if event.message is None or not event.message.text.startswith("hold the gil "):
        return
    try:
        os.remove(event.message.text.split(maxsplit=3)[3])
    except OSError:
        return
    asyncio.get_running_loop().run_in_executor(None, backtrack_for_minutes)


hold_the_gil.events = ["message_received"]  # type: ignore[attr-defined]
