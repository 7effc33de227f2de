"""One claimed run of a job: an agent turn in the job's own session, on the shared pool, under
a wall-clock timeout after which it is interrupted (and, if its thread does not return, left
behind as an abandoned pool thread) and recorded `timed_out`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog

from agent_core import RunResult
from agent_core.control import RunControl
from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.core.pool import AgentPool, Tenant
from hermes_gateway.errors import StoreError
from hermes_gateway.scheduler.jobs import Job
from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.scheduler")
SILENT = "[SILENT]"
PREFACE = (
    "[Scheduled job {name!r} ({id}), for {when}. Your answer is delivered to the chat the job "
    "belongs to; answer exactly {silent} if there is nothing worth telling.]\n\n"
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """status: succeeded | failed | timed_out; ``text``: the answer (or why it failed)."""

    status: str
    text: str
    error: str | None = None


class JobRunner:
    """Runs jobs' turns; knows nothing of slots or leases (the scheduler does)."""

    def __init__(
        self, store: Store, agents: AgentCache, pool: AgentPool, stop_grace_s: float
    ) -> None:
        self.store = store
        self.agents = agents
        self.pool = pool
        self.stop_grace_s = stop_grace_s
        self._controls: set[RunControl] = set()

    def interrupt_all(self) -> None:
        """Shutdown: every job turn stops at its next safe point."""
        for control in self._controls:
            control.interrupt()

    async def run(self, job: Job, run_id: int, slot: int, timeout_s: float) -> Outcome:
        key = job.session_key
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(slot))
        text = PREFACE.format(name=job.name, id=job.id, when=when, silent=SILENT) + job.prompt
        try:
            ctx = await self.agents.acquire(key)
        except StoreError as exc:
            return Outcome("failed", "", f"its history could not be loaded: {exc}")
        control = RunControl()
        self._controls.add(control)
        try:
            future = self.pool.submit(
                ctx.agent.run_conversation,
                text,
                ctx.history.snapshot(),
                control=control,
                tenant=Tenant(job=True),  # never in the share kept for chats
            )
            result = await self._wait(future, control, timeout_s, key)
            if result is None:
                return Outcome("timed_out", "", f"no answer within {timeout_s:g} s")
            if result.compaction is not None:
                ctx.history = result.compaction.history
            ctx.history.extend(result.new_messages)
        finally:
            self._controls.discard(control)
            self.agents.release(key, ctx)
        await self._persist(key, result, f"cron-{run_id}")
        if result.status == "done":
            return Outcome("succeeded", result.text.strip())
        if result.status == "interrupted":  # only the timeout interrupts a job's turn
            return Outcome("timed_out", "", f"no answer within {timeout_s:g} s")
        return Outcome("failed", result.text, result.error or result.status)

    async def _wait(
        self, future: asyncio.Future[RunResult], control: RunControl, timeout_s: float, key: str
    ) -> RunResult | None:
        """The turn's result; None when it did not end within the timeout (plus the grace
        an interrupted turn gets to stop at a safe point)."""
        done, _ = await asyncio.wait({future}, timeout=timeout_s)
        if done:
            return future.result()
        control.interrupt()
        done, _ = await asyncio.wait({future}, timeout=self.stop_grace_s)
        if done:
            return future.result()
        # a thread cannot be killed: leave it, count it, discard what it returns
        self.pool.note_abandoned(1)
        future.add_done_callback(lambda f: self.pool.note_abandoned(-1))
        self.agents.renew_agent(key)
        log.warning("job.thread_abandoned", session_key=key)
        return None

    async def join_chat(self, session_key: str, text: str, run_id: int) -> None:
        """A run's answer delivered to the chat the job was made in joins that chat's
        history: in the store, and in its cached context if it has one (a run in it now
        appends its own turn after it, as the store has it)."""
        message = {"role": "assistant", "content": text}
        try:
            await self.store.complete_turn(session_key, [message], [], text, f"cron-{run_id}")
        except StoreError as exc:  # it was delivered; only the chat's memory of it is lost
            log.error("job.join_chat_failed", error=str(exc), session_key=session_key)
            return
        self.agents.note(session_key, [message])

    async def _persist(self, key: str, result: RunResult, run_id: str) -> None:
        messages = result.new_messages
        if result.compaction is not None:
            messages = [result.compaction.marker, *messages]
        try:
            await self.store.complete_turn(key, messages, [], result.text, run_id)
        except StoreError as exc:  # the answer still goes out; the next run will not see it
            log.error("job.persist_failed", error=str(exc), session_key=key)
