"""The cluster's background loops stop at a gateway stop, even when the cancel meant to stop
them is lost inside a Redis read (its own timeout firing at the same moment)."""

from __future__ import annotations

import asyncio

from hermes_gateway.cluster import ownership
from hermes_gateway.errors import CoordinationUnavailable


async def test_a_loop_whose_cancel_was_lost_still_ends_at_close() -> None:
    closing = False
    reads = 0

    async def read() -> None:
        nonlocal reads
        reads += 1
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:  # the first read loses the cancel, as Redis's can
            if reads > 1:
                raise  # (a later cancel ends it: the test can clean up when it fails)
            raise CoordinationUnavailable("Redis: TimeoutError") from None

    loop = asyncio.create_task(ownership._forever(read, 0.01, lambda: closing))
    await asyncio.sleep(0.05)
    closing = True  # as `Ownership.close` does, before it cancels
    loop.cancel()
    await asyncio.wait({loop}, timeout=2)
    try:
        assert loop.done() and reads == 1  # before `closing`, it read again for ever
    finally:
        loop.cancel()
