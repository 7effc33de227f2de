"""A deliberately bad user hook for the watchdog tests: it blocks the event loop."""

from __future__ import annotations

import time

from hermes_gateway.core.bus import LifecycleEvent


async def freeze_the_loop(event: LifecycleEvent) -> None:
    if event.message is not None and "freeze" in event.message.text:
        time.sleep(float(event.message.text.split()[-1]))  # blocking on purpose


freeze_the_loop.events = ["message_received"]  # type: ignore[attr-defined]
