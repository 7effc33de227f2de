"""Crash and restart recovery: what the inbox holds from the last run is finished now.

Replies computed but never confirmed sent are sent again (no second model call); messages
accepted but never answered run again, merged per session into one turn. Entries older than
`store.replay_max_age_s` were already expired by the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import structlog

from hermes_gateway.commands import parse_command
from hermes_gateway.config import Config
from hermes_gateway.delivery import Delivery
from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.platform import Adapter
from hermes_gateway.runner import GatewayRunner
from hermes_gateway.sessions import Pending
from hermes_gateway.store import Store, Undelivered

log = structlog.get_logger("hermes.replay")


class Replayer:
    def __init__(
        self,
        store: Store,
        runner: GatewayRunner,
        delivery: Delivery,
        adapters: Mapping[str, Adapter],
        config: Config,
    ) -> None:
        self.store = store
        self.runner = runner
        self.delivery = delivery
        self.adapters = adapters
        self.config = config
        self._left: tuple[list[tuple[int, MessageEvent]], list[Undelivered]] | None = None

    async def load(self) -> None:
        """Read what the last run left in the inbox. Call it before intake starts: read later,
        a message this run already took would look left over and be answered twice."""
        try:
            self._left = await self.store.replayable(self.config.store.replay_max_age_s)
        except StoreError as exc:
            log.error("replay.failed", error=str(exc))
            self._left = ([], [])

    async def run(self) -> None:
        if self._left is None:
            await self.load()
        assert self._left is not None
        to_run, to_send = self._left
        if not to_run and not to_send:
            return
        log.info("replay.start", reruns=len(to_run), resends=len(to_send))
        platforms = {ev.platform for _, ev in to_run} | {u.event.platform for u in to_send}
        for platform in sorted(platforms):
            if not await self._wait_ready(platform):
                continue
            for undelivered in to_send:
                if undelivered.event.platform == platform:
                    await self._resend(undelivered)
            await self._rerun([(i, ev) for i, ev in to_run if ev.platform == platform])

    async def _wait_ready(self, platform: str) -> bool:
        adapter = self.adapters.get(platform)
        if adapter is None:
            log.warning("replay.platform_disabled", platform=platform)
            return False
        # readiness is derived from SDK state; this 0.1 s poll only runs at start
        while not adapter.health().ready:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        return True

    async def _resend(self, u: Undelivered) -> None:
        out = OutboundMessage.to(u.event, u.reply, run_id=u.run_id)
        await self.delivery.send(out, [u.inbox_id], outcome="replayed", event=u.event)

    async def _rerun(self, entries: list[tuple[int, MessageEvent]]) -> None:
        by_session: dict[str, list[Pending]] = {}
        stale_commands: list[int] = []
        for inbox_id, ev in entries:
            if parse_command(ev.text) is not None:
                stale_commands.append(inbox_id)  # a /stop from before the restart means nothing now
                continue
            by_session.setdefault(ev.session_key, []).append(Pending(ev, inbox_id))
        if stale_commands:
            await self.store.mark(stale_commands, "expired")
        for key, items in by_session.items():
            log.info("replay.session", session_key=key, messages=len(items))
            if self.runner.table.active(key) is None:
                self.runner.start(items)
            else:
                self.runner.table.push_front(key, items)
