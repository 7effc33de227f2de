"""Copies of one Slack message: Slack delivers an event again when it was not acked within
3 s (HTTP and Socket Mode alike), and a mention comes as a ``message`` and an ``app_mention``
event with one ts. A copy that arrives while the first is still being stored waits for it."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from hermes_gateway.platforms import Recent

LAST_RETRY = 3  # Slack retries an event three times (X-Slack-Retry-Num 1..3), then drops it


class Copies:
    """Which copy of a message is taken. A repeat of a stored message is dropped (the inbox
    would fold it anyway; this spares it an access check and a pairing reply); a repeat of a
    message the store refused is taken anew. Acking a repeat at once while the first copy is
    still being stored would lose the message whenever that store then fails."""

    def __init__(self) -> None:
        self._seen = Recent()  # (channel, ts) taken or being taken
        self._pending: dict[Hashable, asyncio.Future[bool]] = {}

    async def first(self, key: Hashable) -> bool:
        """True: take this copy (the first, or the first was not stored); False: a repeat."""
        while (pending := self._pending.get(key)) is not None:
            if await asyncio.shield(pending):
                return False
        if not self._seen.add(key):
            return False
        self._pending[key] = asyncio.get_running_loop().create_future()
        return True

    def settle(self, key: Hashable, stored: bool) -> None:
        """The copy ``first`` let through is done: ``stored`` (or otherwise settled: refused,
        a duplicate), or left with Slack, whose next copy is then taken anew."""
        pending = self._pending.pop(key, None)
        if not stored:
            self._seen.discard(key)
        if pending is not None and not pending.done():
            pending.set_result(stored)
