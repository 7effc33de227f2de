"""A run's answer to its chat, through the same `Delivery` as chat replies (splitting, the
adapter's retries), recorded on the run: how many parts went out and whether it arrived. It
goes straight to the platform, so it neither waits for nor interrupts a chat turn running in
that chat; what the platform refused is offered again, with pauses, and recorded `failed` only
once those are spent. An answer delivered to the chat the job was made in joins that chat's
history, so the chat's next turn knows what was said (and a local API client finds it there)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

import structlog

from hermes_gateway.core.delivery import Delivery
from hermes_gateway.errors import FencedOut, StoreError
from hermes_gateway.events import Chat, OutboundKind, OutboundMessage, build_session_key
from hermes_gateway.platform_spec import capabilities
from hermes_gateway.platforms.adapter import Adapter
from hermes_gateway.scheduler.jobs import Job, target
from hermes_gateway.scheduler.ledger import Ledger

log = structlog.get_logger("hermes.scheduler")


class JobOutbox:
    """Delivers runs' answers; retries in the background and says how it ended."""

    retry_delays: tuple[float, ...] = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0)

    def __init__(
        self,
        delivery: Delivery,
        adapters: Mapping[str, Adapter],
        ledger: Ledger,
        join_chat: Callable[[str, str, int], Awaitable[None]] | None = None,
        per_user: Callable[[], bool] = lambda: True,
    ) -> None:
        """``join_chat(session_key, text, run_id)`` adds a delivered answer to that chat's
        history; ``per_user``: whether a group chat has a session per user
        (`runner.group_sessions_per_user`), to name the chat's session."""
        self.delivery = delivery
        self.adapters = adapters
        self.ledger = ledger
        self.join_chat = join_chat
        self.per_user = per_user
        self.outcomes: dict[str, int] = {}

    async def deliver(
        self,
        job: Job,
        run_id: int,
        text: str,
        kind: OutboundKind = "reply",
        parts_sent: int = 0,
        doubt: str | None = None,
    ) -> str:
        """Send until delivered or the retries are spent; returns (and records) delivered,
        failed or skipped (nowhere to send it), or returns taken: another gateway adopted the
        delivery after this one's lease lapsed, and no further part goes out from here.

        Taken up after a crash, it resumes at ``parts_sent``; ``doubt`` (`RunRecord.doubt`)
        when that part's send had begun: the adapter checks whether it went out before
        sending it again, as the chat replay does."""
        where = target(job.deliver, job.origin)
        platform = where.platform
        caps = capabilities(platform) if platform is not None else None
        reachable = caps is not None and (caps.can_push or caps.keeps_unasked)
        if platform is None or not reachable or platform not in self.adapters:
            # nowhere to send it: the answer is in the job's runs
            final = "skipped"
            if reachable:
                log.error("job.no_adapter", job_id=job.id, platform=where.platform)
                final = "failed"
            await self._record(run_id, final)
            return final
        track = Tracking(self.ledger, run_id, parts_sent)
        for attempt in range(len(self.retry_delays) + 1):
            if attempt:
                await asyncio.sleep(self.retry_delays[attempt - 1])
            chat = Chat(platform, where.chat_id, where.thread_id, job.session_key)
            out = OutboundMessage.to(
                chat,
                text,
                kind,
                run_id=f"cron-{run_id}",
                skip_parts=track.sent,
                on_part=track.progress,
                outcome="scheduled",
            )
            # the part left in doubt, until a later attempt got past it
            checked = doubt if track.sent == parts_sent else None
            out = replace(out, on_sending=track.sending, doubt=checked)
            if await self.delivery.send(out, outcome="scheduled"):
                await self._record(run_id, "delivered")
                await self._join(job, run_id, text)
                return "delivered"
            if track.taken:  # not ours to record either
                log.warning("job.delivery_taken_over", job_id=job.id, run_id=run_id)
                return "taken"
            log.warning("job.delivery_failed", job_id=job.id, run_id=run_id, attempt=attempt + 1)
        await self._record(run_id, "failed")
        return "failed"

    async def _join(self, job: Job, run_id: int, text: str) -> None:
        """After the delivery is recorded: a crash in between costs the history its copy,
        rather than giving it two."""
        if self.join_chat is None or job.deliver != "origin":
            return
        o = job.origin
        key = build_session_key(
            o.platform, o.chat_type, o.chat_id, o.thread_id, o.user_id, per_user=self.per_user()
        )
        await self.join_chat(key, text, run_id)

    async def _record(self, run_id: int, final: str) -> None:
        self.outcomes[final] = self.outcomes.get(final, 0) + 1
        for pause in (0.0, 1.0, 5.0):  # a short store outage must not leave it "pending"
            await asyncio.sleep(pause)
            try:
                await self.ledger.delivered(run_id, final)
                return
            except StoreError as exc:
                log.error("job.delivery_record_failed", error=str(exc), run_id=run_id)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.outcomes)


class Tracking:
    """One delivery's record on its run: the parts that went out, and before each part the
    intent a crash leaves behind (`Ledger.intent`)."""

    def __init__(self, ledger: Ledger, run_id: int, parts_sent: int) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.sent = parts_sent
        self.taken = False  # another gateway took this delivery over: it sends the rest

    async def progress(self, parts: int) -> None:
        self.sent = parts
        try:
            await self.ledger.delivered(self.run_id, "pending", parts)
        except StoreError as exc:  # the parts go on; a crash now would repeat them
            log.error("job.progress_failed", error=str(exc), run_id=self.run_id)

    async def sending(self, index: int, after: str) -> None:
        try:
            ours = await self.ledger.intent(self.run_id, index, after)
        except StoreError as exc:  # the part goes on; a crash during its send repeats it
            log.error("job.intent_failed", error=str(exc), run_id=self.run_id)
            return
        if not ours:  # our lease lapsed (a pause) and another gateway adopted the answer
            self.taken = True
            raise FencedOut(f"run {self.run_id}: its delivery is another gateway's now")
