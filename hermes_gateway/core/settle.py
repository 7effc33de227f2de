"""The settle step of a run: store the turn with its reply, deliver it, tell dropped messages.

`GatewayRunner` calls it once the agent returned; it holds no session state of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from agent_core import RunResult
from hermes_gateway.agents.cache import SessionContext
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.job_turns import withdraw
from hermes_gateway.core.run import EMPTY_ANSWER, Run, inbox_ids
from hermes_gateway.core.sessions import Pending
from hermes_gateway.errors import FencedOut, StoreError
from hermes_gateway.events import MessageEvent, OutboundFile, OutboundMessage
from hermes_gateway.metrics import Metrics
from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.runner")
# (the turn's newest message, every message's text merged, the reply): a completed turn, for
# whoever keeps a record of it (the memory archive's auto-retain); must not block
TurnDone = Callable[[MessageEvent, str, str], None]


class Settler:
    """Writes a run's outcome to the store and hands its replies to delivery."""

    def __init__(
        self, store: Store, delivery: Delivery, metrics: Metrics, on_turn: TurnDone | None = None
    ) -> None:
        self.store = store
        self.delivery = delivery
        self.metrics = metrics
        self.on_turn = on_turn

    async def settle(self, run: Run, ctx: SessionContext, result: RunResult) -> None:
        """Store the turn with its reply ("done"), deliver it, then mark it answered.

        The history is never lost or run twice: a crash before the send leaves the reply in
        the store, and the next start sends it without a new model call. The one window for a
        doubled part is between the platform's OK for it and the commit recording it (~1 ms).
        """
        consumed = run.steered[: result.steered]
        if result.status == "interrupted" and run.shutdown:
            return  # left unanswered in the inbox: replayed at the next start
        answered = run.items + consumed
        if result.compaction is not None:  # older turns were summarized
            ctx.history = result.compaction.history
        ctx.history.extend(result.new_messages)
        if result.status == "interrupted":
            if not await self.persist(run, result, answered, reply="", status="answered"):
                return
            self.metrics.answered.labels(run.primary.platform, "interrupted").inc(len(answered))
            run.carry_forward = run.carried + answered
            return
        text = result.text or EMPTY_ANSWER
        files = tuple(run.files)  # `send_file`'s: they go after the text, and with it
        if not await self.persist(run, result, answered, reply=text, status="done", files=files):
            return
        if self.on_turn is not None and result.status == "done" and turn_user(answered):
            self.on_turn(run.primary, "\n\n".join(p.event.text for p in answered), text)
        why = {"usage": result.usage, "error": result.error or "", "files": files}
        await self.reply(run, text, "reply", result.status, answered + run.carried, **why)

    async def persist(
        self,
        run: Run,
        result: RunResult,
        items: list[Pending],
        reply: str,
        status: str,
        files: tuple[OutboundFile, ...] = (),
    ) -> bool:
        """Store the turn; False when the store refused it because the session's lease passed
        to another instance (cluster mode): then nothing of this run may go out."""
        messages = result.new_messages
        if result.compaction is not None:  # the marker first: a reload starts from it
            messages = [result.compaction.marker, *messages]
        try:
            await self.store.complete_turn(
                run.key,
                messages,
                inbox_ids(items),
                reply,
                run.run_id,
                status=status,
                user_id=turn_user(items),
                fence=run.fence,
                files=files,
            )
        except FencedOut as exc:
            log.warning("run.fenced_out", error=str(exc), reply="not sent")
            return False
        except StoreError as exc:
            # the reply still goes out (the inbox entry is settled once the store can write),
            # but this turn is not in the history
            log.error("run.persist_failed", error=str(exc), reply="delivered unpersisted")
        return True

    async def persist_abandoned(self, run: Run, record: list[dict[str, Any]]) -> None:
        ids = inbox_ids(run.items + run.steered)
        try:
            await self.store.complete_turn(
                run.key,
                record,
                ids,
                "",
                run.run_id,
                status="answered",
                user_id=turn_user(run.items + run.steered),
                fence=run.fence,
            )
        except (StoreError, FencedOut) as exc:
            log.error("run.persist_failed", error=str(exc), run_id=run.run_id)

    async def reply(
        self,
        run: Run,
        text: str,
        kind: str,
        outcome: str,
        answered: list[Pending] | None = None,
        **extra: Any,  # usage, error: for the local API; files
    ) -> None:
        items = answered if answered is not None else run.items + run.carried
        # the newest message is the one a platform quotes; the rest are settled with it
        ordered = sorted(items, key=lambda p: p.event.received_at, reverse=True)
        event = run.primary
        out = OutboundMessage.to(
            event,  # every message of a run is of its session (`run.key`)
            text,
            kind,  # type: ignore[arg-type]
            answers=tuple(p.event.message_id for p in ordered),
            run_id=run.run_id,
            outcome=outcome,
            **extra,
        )
        # under the run's fence: once the session moved on, its new owner sends the rest
        ids = inbox_ids(items)
        await self.delivery.send(out, ids, outcome=outcome, event=event, fence=run.fence)

    async def tell_waiting(self, run: Run, text: str) -> None:
        """A notice that ``run`` waits for the pool; it settles nothing (answers no request:
        the local API's client keeps waiting for the answer)."""
        event = run.primary
        await self.delivery.send(OutboundMessage.to(event, text, "notice", answers=()), event=event)

    async def tell_dropped(self, item: Pending, text: str, reason: str) -> None:
        if item.job is not None:  # a job's turn: its outcome says so, to the scheduler
            withdraw([item], reason)
            return
        self.metrics.dropped.labels(item.event.platform, reason).inc()
        log.info("message.dropped", reason=reason, message_id=item.event.message_id)
        await self.delivery.send(
            OutboundMessage.to(item.event, text, kind="notice", outcome=reason),
            [item.inbox_id],
            outcome=reason,
            status="dropped",
            event=item.event,
        )


def turn_user(items: list[Pending]) -> str:
    """The user whose turn this is, or "" when it merged several users' messages (a shared
    session): such a turn is nobody's alone, so no one user's search or memory gets it."""
    users = {(p.event.platform, p.event.user_id) for p in items}
    return next(iter(users))[1] if len(users) == 1 else ""
