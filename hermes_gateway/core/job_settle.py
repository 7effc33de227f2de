"""The settle step of a job turn: its turn stored in the job's own session, then its answer
delivered to the job's target through the same `Delivery` as chat replies, each part's intent
recorded on the run ledger; what the platform refused is offered again with `Delivery`'s pauses
and recorded `failed` once they are spent. An answer delivered to the chat the job was made in
joins that chat's history, so the chat's next turn knows what was said."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

import structlog

from agent_core import RunResult
from hermes_gateway.agents.cache import AgentCache, SessionContext
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.job_turns import AnswerLedger, JobAnswer, JobTicket, TurnOutcome
from hermes_gateway.errors import FencedOut, StoreError
from hermes_gateway.events import OutboundFile, OutboundMessage
from hermes_gateway.platform_spec import capabilities
from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.scheduler")


class JobSettle:
    """Stores job turns and delivers their answers; ``ledger`` records the deliveries."""

    def __init__(
        self, store: Store, delivery: Delivery, agents: AgentCache, ledger: AnswerLedger | None
    ) -> None:
        self.store = store
        self.delivery = delivery
        self.agents = agents
        self.ledger = ledger
        self.outcomes: Counter[str] = Counter()  # how deliveries ended (not those taken over)

    async def settle(
        self,
        ticket: JobTicket,
        ctx: SessionContext,
        result: RunResult,
        *,
        shutdown: bool,
        files: tuple[OutboundFile, ...] = (),
    ) -> TurnOutcome | None:
        """Store the turn in the job's session; its outcome (None: stopped by a shutdown),
        with the ``files`` the answer sends after its text when it succeeded."""
        key = ticket.turn.session_key
        if result.status == "interrupted" and shutdown:
            return None
        if result.compaction is not None:  # older turns were summarized
            ctx.history = result.compaction.history
        ctx.history.extend(result.new_messages)
        messages = result.new_messages
        if result.compaction is not None:
            messages = [result.compaction.marker, *messages]
        try:
            await self.store.complete_turn(
                key, messages, [], result.text, f"cron-{ticket.turn.run_id}"
            )
        except StoreError as exc:  # the answer still goes out; the next run will not see it
            log.error("job.persist_failed", error=str(exc), session_key=key)
        if result.status == "done":
            return TurnOutcome("succeeded", result.text.strip(), files=files)
        if result.status == "interrupted":
            return ticket.ended("interrupted")
        return TurnOutcome("failed", result.text, result.error or result.status)

    async def deliver(self, answer: JobAnswer) -> str:
        """Send until delivered or the pauses are spent; returns (and records) delivered,
        failed or skipped (nowhere to send it), or returns taken: another gateway adopted the
        delivery after this one's lease lapsed, and no further part goes out from here.

        Taken up after a crash, it resumes at ``parts_sent``; ``doubt`` when that part's send
        had begun: the adapter checks whether it went out before sending it again, as the chat
        replay does."""
        assert self.ledger is not None, "a runner built without a run ledger delivers no job"
        chat = answer.chat
        caps = capabilities(chat.platform) if chat is not None else None
        reachable = caps is not None and (caps.can_push or caps.keeps_unasked)
        if chat is None or not reachable or chat.platform not in self.delivery.adapters:
            final = "skipped"  # nowhere to send it: the answer is in the job's runs
            if reachable and chat is not None:
                log.error("job.no_adapter", run_id=answer.run_id, platform=chat.platform)
                final = "failed"
            await self._record(answer.run_id, final)
            return final
        track = Tracking(self.ledger, answer.run_id, answer.parts_sent)
        delays = self.delivery.redeliver_delays
        for attempt in range(len(delays) + 1):
            if attempt:
                await asyncio.sleep(delays[attempt - 1])
            if await self._attempt(answer, track):
                await self._record(answer.run_id, "delivered")
                await self._join(answer)
                return "delivered"
            if track.taken:  # not ours to record either
                log.warning("job.delivery_taken_over", run_id=answer.run_id)
                return "taken"
            log.warning("job.delivery_failed", run_id=answer.run_id, attempt=attempt + 1)
        await self._record(answer.run_id, "failed")
        return "failed"

    async def _attempt(self, answer: JobAnswer, track: Tracking) -> bool:
        assert answer.chat is not None
        out = OutboundMessage.to(
            answer.chat,
            answer.text,
            answer.kind,
            run_id=f"cron-{answer.run_id}",
            skip_parts=track.sent,
            on_part=track.progress,
            outcome="scheduled",
            files=answer.files,
        )
        # the part left in doubt, until a later attempt got past it
        checked = answer.doubt if track.sent == answer.parts_sent else None
        out = replace(out, on_sending=track.sending, doubt=checked)
        return await self.delivery.send(out, outcome="scheduled")

    async def _join(self, answer: JobAnswer) -> None:
        """After the delivery is recorded: a crash in between costs the history its copy,
        rather than giving it two. A run in that chat now appends its own turn after it, as
        the store has it."""
        if answer.joins is None:
            return
        key, text = answer.joins, answer.text
        message = {"role": "assistant", "content": text}
        try:
            await self.store.complete_turn(key, [message], [], text, f"cron-{answer.run_id}")
        except StoreError as exc:  # it was delivered; only the chat's memory of it is lost
            log.error("job.join_chat_failed", error=str(exc), session_key=key)
            return
        self.agents.note(key, [message])

    async def _record(self, run_id: int, final: str) -> None:
        assert self.ledger is not None
        self.outcomes[final] += 1
        for pause in (0.0, 1.0, 5.0):  # a short store outage must not leave it "pending"
            await asyncio.sleep(pause)
            try:
                await self.ledger.delivered(run_id, final)
                return
            except StoreError as exc:
                log.error("job.delivery_record_failed", error=str(exc), run_id=run_id)


class Tracking:
    """One delivery's record on its run: the parts that went out, and before each part the
    intent a crash leaves behind (`AnswerLedger.intent`)."""

    def __init__(self, ledger: AnswerLedger, run_id: int, parts_sent: int) -> None:
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
