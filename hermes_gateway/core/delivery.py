"""Delivery: hand a reply to its platform adapter, record how far it got, and never let a failed
send break the session: the reply stays in the inbox, offered again from its first undelivered
part while the process lives and at the next start."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Literal

import structlog

from hermes_gateway.core.bus import EventBus
from hermes_gateway.errors import (
    AdapterError,
    FencedOut,
    PartialDeliveryError,
    PermanentAdapterError,
    StoreError,
)
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.metrics import Metrics
from hermes_gateway.platforms.adapter import Adapter
from hermes_gateway.store.fence import Fence
from hermes_gateway.store.store import Store
from hermes_gateway.traces import OFF, Tracer

log = structlog.get_logger("hermes.delivery")
# fenced: the session's lease passed to another instance, which sends the rest
DeliveryResult = Literal["delivered", "permanent", "failed", "fenced"]


class Delivery:
    """Sends `OutboundMessage`s and settles the inbox entries they answer."""

    # pauses before offering again a reply the platform could not take; the last one repeats
    redeliver_delays: tuple[float, ...] = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0)

    def __init__(
        self,
        adapters: Mapping[str, Adapter],
        store: Store,
        bus: EventBus,
        metrics: Metrics,
        *,
        tracer: Tracer = OFF,
    ) -> None:
        self.adapters = adapters
        self.store = store
        self.bus = bus
        self.metrics = metrics
        self.tracer = tracer
        self._later: set[asyncio.Task[None]] = set()
        self._owed: Counter[str] = Counter()  # session key -> replies still being settled

    async def send(
        self,
        out: OutboundMessage,
        inbox_ids: Iterable[int | None] = (),
        *,
        outcome: str = "done",
        status: str = "answered",
        event: MessageEvent | None = None,
        fence: Fence | None = None,
    ) -> bool:
        """Deliver ``out``; mark ``inbox_ids`` with ``status`` once the platform took it.

        Returns False when the platform could not take it. A permanent failure (the bot was
        blocked) settles the entries anyway, since retrying cannot help; a transient one (an
        outage longer than the adapter's own retries) is offered again in the background, and
        stays in the inbox for the replay at the next start meanwhile. Either way a reply in
        several parts resumes at its first undelivered part: how far it got is in the inbox.

        Under a ``fence`` (cluster mode: the session lease's token) each part's intent is
        written with it, so once another instance has claimed the session no further part
        goes out from here: that instance replays the reply from the inbox, and a part sent
        from both would be doubled. The entries are then left as they are.
        """
        ids = [i for i in inbox_ids if i is not None]
        if ids:
            on_sending = partial(self._intent, ids, fence)
            out = replace(out, on_part=partial(self._progress, ids), on_sending=on_sending)
        result, sent = await self._attempt(out, outcome, event)
        if result == "fenced":
            return False
        if result == "failed" and ids:
            later = replace(out, skip_parts=sent) if sent else out
            self._later_for(out.session_key, self._redeliver(later, ids, status, event))
        elif ids:
            await self._settle(ids, status if result == "delivered" else "undeliverable", out)
        return result == "delivered"

    async def _progress(self, ids: list[int], parts_sent: int) -> None:
        try:
            await self.store.progress(ids, parts_sent)
        except StoreError as exc:  # the parts go on; a crash now would repeat the sent ones
            log.error("delivery.progress_failed", error=str(exc), inbox_ids=ids)

    async def _intent(self, ids: list[int], fence: Fence | None, index: int, after: str) -> None:
        """`FencedOut` goes up through the adapter's send: this part must not go out."""
        try:
            await self.store.intent(ids, index, after, fence=fence)
        except StoreError as exc:  # the part goes on; a crash during its send would repeat it
            log.error("delivery.intent_failed", error=str(exc), inbox_ids=ids)

    async def _settle(self, ids: list[int], final: str, out: OutboundMessage) -> None:
        try:
            await self.store.mark(ids, final, reply=out.text)
        except StoreError as exc:
            # delivered but not recorded: a restart would answer it again, so record it as
            # soon as the store can write (a full disk freed, a lock released)
            log.error("delivery.settle_failed", error=str(exc), inbox_ids=ids, retry="later")
            self._later_for(out.session_key, self._settle_later(ids, final, out.text))

    async def _settle_later(self, ids: list[int], final: str, reply: str) -> None:
        pause = 0.2
        while True:
            await self.store.circuit.writes.open.wait()
            await asyncio.sleep(pause)
            pause = min(30.0, pause * 2)
            try:
                await self.store.mark(ids, final, reply=reply)
            except StoreError:
                continue
            log.info("delivery.settled_late", inbox_ids=ids, status=final)
            return

    async def _redeliver(
        self, out: OutboundMessage, ids: list[int], status: str, event: MessageEvent | None
    ) -> None:
        """Until the platform takes it: a user must not wait for a restart."""
        attempt = 0
        while True:
            await asyncio.sleep(self.redeliver_delays[min(attempt, len(self.redeliver_delays) - 1)])
            attempt += 1
            result, sent = await self._attempt(out, "redelivered", event)
            if result == "fenced":  # the session's new owner sends it from the inbox
                return
            if result != "failed":
                await self._settle(ids, status if result == "delivered" else "undeliverable", out)
                log.info("delivery.redelivered", attempts=attempt, result=result, inbox_ids=ids)
                return
            if sent > out.skip_parts:
                out = replace(out, skip_parts=sent)

    def _later_for(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        """Finish a reply in the background; until then the session ``owes`` it."""
        task = asyncio.create_task(work)
        self._later.add(task)
        self._owed[key] += 1

        def done(_task: asyncio.Task[None]) -> None:
            self._later.discard(task)
            self._owed[key] -= 1
            if self._owed[key] <= 0:
                del self._owed[key]

        task.add_done_callback(done)

    def owes(self, key: str) -> bool:
        """A reply of the session is still being delivered or recorded in the background
        (cluster mode keeps the session's lease until then: another instance would resend it)."""
        return key in self._owed

    async def close(self) -> None:
        """Stop offering what is still undelivered: the replay at the next start sends it."""
        for task in self._later:
            task.cancel()
        await asyncio.gather(*self._later, return_exceptions=True)

    async def _attempt(
        self, out: OutboundMessage, outcome: str, event: MessageEvent | None
    ) -> tuple[DeliveryResult, int]:
        """Hand ``out`` to its adapter and record the outcome (no inbox entry is touched);
        also how many of its parts went out when it failed part-way."""
        adapter = self.adapters.get(out.platform)
        result: DeliveryResult = "failed"
        sent = 0
        if adapter is None:
            log.error("delivery.no_adapter", platform=out.platform)
        else:
            try:
                attrs = {"hermes.platform": out.platform, "hermes.reply.kind": out.kind}
                with self.tracer.span("reply.send", attrs) as span:
                    await adapter.send(out)
                    span.set("hermes.reply.chars", len(out.text))
                result = "delivered"
            except PermanentAdapterError as exc:
                result = "permanent"
                log.warning("delivery.permanent_failure", platform=out.platform, error=str(exc))
            except FencedOut as exc:
                result = "fenced"
                log.warning("delivery.fenced_out", platform=out.platform, error=str(exc))
            except PartialDeliveryError as exc:
                sent = exc.parts_sent
                log.error("delivery.failed", platform=out.platform, error=str(exc), parts_sent=sent)
            except AdapterError as exc:
                log.error("delivery.failed", platform=out.platform, error=str(exc))
            except Exception:
                log.exception("delivery.crashed", platform=out.platform)
        if result == "delivered":
            self.metrics.answered.labels(out.platform, outcome).inc(max(1, len(out.answers)))
            self.bus.emit(
                "response_sent", event, run_id=out.run_id, kind=out.kind, chars=len(out.text)
            )
        elif result != "fenced":
            self.metrics.delivery_failures.labels(out.platform).inc()
            self.bus.emit("error", event, run_id=out.run_id, stage="delivery")
        return result, sent
