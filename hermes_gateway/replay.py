"""Crash and restart recovery: what the inbox holds from the last run is finished now.

Replies computed but never confirmed sent are sent again (no second model call), from their
first undelivered part; messages accepted but never answered run again, merged per session into
one turn. A live preview the crash left half-written is finished by either. Entries older than
`store.replay_max_age_s` were already expired by the store; entries that runs kept dying on
(`store.quarantine_after` of them) are quarantined, not run again, and their users told so.
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
from hermes_gateway.platform import Adapter, PreviewResumer, ReplyResumer
from hermes_gateway.quarantine import NOTICE, log_quarantined
from hermes_gateway.run import with_text
from hermes_gateway.runner import GatewayRunner
from hermes_gateway.sessions import Pending
from hermes_gateway.store import Quarantined, Store, Undelivered

log = structlog.get_logger("hermes.replay")
RESTARTED = (
    "I restarted before I could act on /{command}, so I did not; send it again if you still "
    "need it."
)


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
        self.held: list[Quarantined] = []  # quarantined by this start: their users are told

    async def load(self) -> None:
        """Read what the last run left in the inbox. Call it before intake starts: read later,
        a message this run already took would look left over and be answered twice."""
        cfg = self.config.store
        try:
            # first: a message the last runs died on must not be among the ones run again
            self.held = await self.store.quarantine(cfg.quarantine_after, cfg.replay_max_age_s)
            log_quarantined(self.held)
            self._left = await self.store.replayable(cfg.replay_max_age_s)
        except StoreError as exc:
            log.error("replay.failed", error=str(exc))
            self._left = ([], [])

    async def run(self) -> None:
        if self._left is None:
            await self.load()
        assert self._left is not None
        to_run, to_send = self._left
        if not to_run and not to_send and not self.held:
            return
        log.info(
            "replay.start", reruns=len(to_run), resends=len(to_send), quarantined=len(self.held)
        )
        held_ids = [q.inbox_id for q in self.held]
        previews = await self._previews(
            [i for i, _ in to_run] + [u.inbox_id for u in to_send] + held_ids
        )
        platforms = {ev.platform for _, ev in to_run} | {u.event.platform for u in to_send}
        for platform in sorted(platforms | {q.event.platform for q in self.held}):
            if not await self._wait_ready(platform):
                continue
            await self._tell_held([q for q in self.held if q.event.platform == platform], previews)
            for reply in by_reply([u for u in to_send if u.event.platform == platform]):
                await self._resend(reply, previews)
            await self._rerun([(i, ev) for i, ev in to_run if ev.platform == platform], previews)

    async def _tell_held(self, held: list[Quarantined], previews: dict[int, str]) -> None:
        """One notice per session for its quarantined messages (in the preview the crash left,
        if any). It settles nothing: the entries stay quarantined for the operator."""
        by_session: dict[str, list[Quarantined]] = {}
        for q in held:
            by_session.setdefault(q.event.session_key, []).append(q)
        for group in by_session.values():
            events = [q.event for q in group]
            newest = max(events, key=lambda ev: ev.received_at)
            self._adopt(newest, [previews.get(q.inbox_id) for q in group])
            self._resume(events)
            notice = OutboundMessage.to(newest, NOTICE, kind="notice")
            await self.delivery.send(notice, outcome="quarantined", event=newest)

    async def _previews(self, inbox_ids: list[int]) -> dict[int, str]:
        try:
            return await self.store.previews(inbox_ids)
        except StoreError as exc:  # the replies still go out, as new messages
            log.error("replay.previews_failed", error=str(exc))
            return {}

    async def _wait_ready(self, platform: str) -> bool:
        adapter = self.adapters.get(platform)
        if adapter is None:
            log.warning("replay.platform_disabled", platform=platform)
            return False
        # readiness is derived from SDK state; this 0.1 s poll only runs at start
        while not adapter.health().ready:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        return True

    async def _resend(self, group: list[Undelivered], previews: dict[int, str]) -> None:
        """One stored reply, sent once for every message it answers, from its first part the
        last run did not deliver."""
        newest = sorted(group, key=lambda u: u.event.received_at, reverse=True)
        event = newest[0].event
        sent = min(u.parts_sent for u in group)
        if sent == 0:  # else the preview, if any, is already the reply's first part
            self._adopt(event, [previews.get(u.inbox_id) for u in group])
        out = OutboundMessage(
            platform=event.platform,
            chat_id=event.chat_id,
            thread_id=event.thread_id,
            text=newest[0].reply,
            session_key=event.session_key,
            answers=tuple(u.event.message_id for u in newest),
            run_id=newest[0].run_id,
            skip_parts=sent,
        )
        self._resume([u.event for u in group])
        ids = [u.inbox_id for u in group]
        await self.delivery.send(out, ids, outcome="replayed", event=event)

    def _resume(self, events: list[MessageEvent]) -> None:
        """Let the adapter answer these messages the way it meant to (a slash command through
        its interaction) rather than as a plain reply, when it kept how in the inbox."""
        for ev in events:
            adapter = self.adapters.get(ev.platform)
            if ev.reply_context and isinstance(adapter, ReplyResumer):
                adapter.resume_reply(ev)

    def _adopt(self, event: MessageEvent, refs: list[str | None]) -> None:
        """Hand the newest half-written preview to the adapter, keyed where the next preview
        or reply answering ``event`` looks for its own."""
        ref = next((r for r in reversed(refs) if r), None)
        adapter = self.adapters.get(event.platform)
        if ref is not None and isinstance(adapter, PreviewResumer):
            adapter.adopt_preview(event, ref)

    async def _rerun(
        self, entries: list[tuple[int, MessageEvent]], previews: dict[int, str]
    ) -> None:
        by_session: dict[str, list[Pending]] = {}
        commands: list[tuple[int, MessageEvent, str]] = []
        for inbox_id, ev in entries:
            parsed = parse_command(ev.text)
            if parsed is None:
                by_session.setdefault(ev.session_key, []).append(Pending(ev, inbox_id))
                continue
            name, args = parsed
            if name in ("queue", "steer") and args:  # they carry a message: it runs
                item = Pending(with_text(ev, args), inbox_id, separate=name == "queue")
                by_session.setdefault(ev.session_key, []).append(item)
            else:
                commands.append((inbox_id, ev, name))
        for key, items in by_session.items():
            log.info("replay.session", session_key=key, messages=len(items))
            # the run answering them streams into (or replies in) the killed run's preview
            self._adopt(items[-1].event, [previews.get(p.inbox_id or 0) for p in items])
            self._resume([p.event for p in items])
            if self.runner.table.active(key) is None:
                self.runner.start(items)
            else:
                self.runner.table.push_front(key, items)
        await asyncio.gather(*(self._not_done(*c) for c in commands))

    async def _not_done(self, inbox_id: int, ev: MessageEvent, command: str) -> None:
        """A command from before the restart is not carried out now (a /stop or /new meant a
        state that is gone), but not dropped unsaid either."""
        self._resume([ev])
        notice = OutboundMessage.to(ev, RESTARTED.format(command=command), kind="notice")
        await self.delivery.send(notice, [inbox_id], outcome="expired", status="dropped", event=ev)


def by_reply(undelivered: list[Undelivered]) -> list[list[Undelivered]]:
    """Entries grouped by the reply they share: a merged turn stores its reply on each of its
    messages, and must not be sent once per message."""
    groups: dict[tuple[str, str] | int, list[Undelivered]] = {}
    for u in undelivered:
        key: tuple[str, str] | int = (u.run_id, u.reply) if u.run_id else u.inbox_id
        groups.setdefault(key, []).append(u)
    return list(groups.values())
