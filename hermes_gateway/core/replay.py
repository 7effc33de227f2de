"""Crash and restart recovery: what the inbox holds from the last run is finished now.

Replies computed but never confirmed sent are sent again (no second model call), from their
first undelivered part; messages accepted but never answered run again, merged per session into
one turn. A live preview the crash left half-written is finished by either. Entries older than
`store.replay_max_age_s` were already expired by the store. What the crash left in flight is
judged first (docs/quarantine.md): those entries become suspects, replayed one at a time across
the gateway (`Probation`); entries shown `store.quarantine_after` times to take the process down
are quarantined, not run again, and their users told so.
Each platform replays on its own once it is ready: one that stays down holds back no other.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import structlog

from hermes_gateway.config import Config
from hermes_gateway.config.live import LiveConfig
from hermes_gateway.core.commands import parse_command
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.quarantine import NOTICE, log_quarantined
from hermes_gateway.core.run import with_text
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.core.sessions import Pending
from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.platforms.adapter import Adapter, PreviewResumer, ReplyResumer
from hermes_gateway.store.store import Quarantined, Store, Undelivered
from hermes_gateway.traces import OFF, Attr, Tracer

log = structlog.get_logger("hermes.replay")
READY_POLL_S = 0.2  # readiness is derived from SDK state; this poll runs only while waiting
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
        config: LiveConfig,
        tracer: Tracer = OFF,
    ) -> None:
        self.store = store
        self.tracer = tracer
        self.runner = runner
        self.delivery = delivery
        self.adapters = adapters
        self.live = config
        self._left: tuple[list[tuple[int, MessageEvent]], list[Undelivered]] | None = None
        self.held: list[Quarantined] = []  # quarantined by this start: their users are told
        self.suspects: dict[int, int] = {}  # run on probation: inbox id -> crashes counted
        self._loaded_at = 0.0

    @property
    def config(self) -> Config:
        return self.live.now

    async def load(self, session_key: str | None = None) -> None:
        """Read what the last run left in the inbox (of one session: a cluster takeover, under
        its lease). Call it before intake starts: read later, a message this run already took
        would look left over and be answered twice."""
        cfg = self.config.store
        self._loaded_at = time.time()
        try:
            # first: a message the last runs died on must not be among the ones run again
            one = {} if session_key is None else {"session_key": session_key}
            self.held = await self.store.quarantine(
                cfg.quarantine_after, cfg.replay_max_age_s, **one
            )
            log_quarantined(self.held)
            self.suspects = await self.store.suspects(cfg.replay_max_age_s, **one)
            self.runner.suspect(self.suspects)
            self._left = await self.store.replayable(cfg.replay_max_age_s, **one)
        except StoreError as exc:
            log.error("replay.failed", error=str(exc))
            self._left = ([], [])

    def skip(self, known: Callable[[str, int], bool]) -> None:
        """Drop loaded entries ``known(session_key, inbox_id)`` says are being answered."""
        if self._left is not None:
            to_run, to_send = self._left
            self._left = (
                [(i, ev) for i, ev in to_run if not known(ev.session_key, i)],
                [u for u in to_send if not known(u.event.session_key, u.inbox_id)],
            )

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
        shares: dict[str, Share] = {}
        for i, ev in to_run:
            shares.setdefault(ev.platform, Share()).to_run.append((i, ev))
        for u in to_send:
            shares.setdefault(u.event.platform, Share()).to_send.append(u)
        for q in self.held:
            shares.setdefault(q.event.platform, Share()).held.append(q)
        await asyncio.gather(*(self._guarded(p, shares[p], previews) for p in sorted(shares)))

    async def _guarded(self, platform: str, share: Share, previews: dict[int, str]) -> None:
        try:
            await self._replay(platform, share, previews)
        except Exception:  # what failed stays in the inbox; the other platforms go on
            log.exception("replay.platform_failed", platform=platform, **share.counts())

    async def _replay(self, platform: str, share: Share, previews: dict[int, str]) -> None:
        """One platform's share, once that platform is ready. Every entry was younger than
        `store.replay_max_age_s` when read, so it waits that long at most; then its entries
        expire, as they would have at a start that late."""
        adapter = self.adapters.get(platform)
        if adapter is None:
            log.warning("replay.platform_disabled", platform=platform, **share.counts())
            return
        max_age = self.config.store.replay_max_age_s
        health = adapter.health()
        if not health.ready:
            log.info("replay.waiting", platform=platform, detail=health.detail, **share.counts())
            if not await _ready_by(adapter, self._loaded_at + max_age):
                await self._expire(platform, share)
                return
        await self._tell_held(share.held, previews)
        for reply in by_reply(share.to_send):
            await self._resend(reply, previews)
        await self._rerun(share.to_run, previews)
        log.info("replay.platform_done", platform=platform, **share.counts())

    async def _expire(self, platform: str, share: Share) -> None:
        """A platform that stayed down past the age limit: its entries are not answered, as
        the store does with entries that old at start. Quarantined ones stay quarantined."""
        ids = [i for i, _ in share.to_run] + [u.inbox_id for u in share.to_send]
        log.warning(
            "replay.expired",
            platform=platform,
            max_age_s=self.config.store.replay_max_age_s,
            **share.counts(),
        )
        if ids:
            try:
                await self.store.mark(ids, "expired")
            except StoreError as exc:  # the next start's replay expires them
                log.error("replay.expire_failed", platform=platform, error=str(exc))

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

    async def _resend(self, group: list[Undelivered], previews: dict[int, str]) -> None:
        """One stored reply, sent once for every message it answers, from its first part the
        last run did not deliver."""
        newest = sorted(group, key=lambda u: u.event.received_at, reverse=True)
        event = newest[0].event
        sent = min(u.parts_sent for u in group)
        doubt = next((u.doubt for u in group if u.parts_sent == sent), None)
        if sent == 0:  # else the preview, if any, is already the reply's first part
            self._adopt(event, [previews.get(u.inbox_id) for u in group])
        out = OutboundMessage.to(
            event,
            newest[0].reply,
            answers=tuple(u.event.message_id for u in newest),
            run_id=newest[0].run_id,
            skip_parts=sent,
            files=newest[0].files,
        )
        if doubt is not None:  # the crash cut that part's send short: it may be out already
            out = replace(out, doubt=doubt)
        self._resume([u.event for u in group])
        ids = [u.inbox_id for u in group]
        fence = self.runner.fence_for(event.session_key)  # cluster: the takeover's lease
        with self._traced("resend", [u.event for u in group]):
            await self.delivery.send(out, ids, outcome="replayed", event=event, fence=fence)

    @contextmanager
    def _traced(self, kind: str, events: list[MessageEvent]) -> Iterator[None]:
        """A replay's own trace (its messages' traces ended with the last run), linked to
        theirs when their inbox rows kept it, and the parent of the run answering them."""
        links = [ev.trace for ev in events if ev.trace]
        attrs: dict[str, Attr] = {"hermes.replay.kind": kind, "hermes.platform": events[0].platform}
        attrs["hermes.replay.messages"] = len(events)
        with self.tracer.root("replay", attrs, links):
            for ev in events:
                self.tracer.adopt(ev)
            yield

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
            alone = inbox_id in self.suspects  # a suspect is never merged with another
            if parsed is None:
                by_session.setdefault(ev.session_key, []).append(Pending(ev, inbox_id, alone))
                continue
            name, args = parsed
            if name in ("queue", "steer") and args:  # they carry a message: it runs
                item = Pending(with_text(ev, args), inbox_id, separate=alone or name == "queue")
                by_session.setdefault(ev.session_key, []).append(item)
            else:
                commands.append((inbox_id, ev, name))
        for key, items in by_session.items():
            log.info("replay.session", session_key=key, messages=len(items))
            # the run answering them streams into (or replies in) the killed run's preview
            self._adopt(items[-1].event, [previews.get(p.inbox_id or 0) for p in items])
            self._resume([p.event for p in items])
            with self._traced("rerun", [p.event for p in items]):
                self.runner.resume(items)
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


@dataclass
class Share:
    """What one platform has to replay."""

    to_run: list[tuple[int, MessageEvent]] = field(default_factory=list)
    to_send: list[Undelivered] = field(default_factory=list)
    held: list[Quarantined] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "reruns": len(self.to_run),
            "resends": len(self.to_send),
            "quarantined": len(self.held),
        }


async def _ready_by(adapter: Adapter, deadline: float) -> bool:
    """Wait for ``adapter`` to be ready, until ``deadline`` (a wall-clock time) at most."""
    while not adapter.health().ready:
        if time.time() >= deadline:
            return False
        await asyncio.sleep(READY_POLL_S)
    return True
