"""Delivery: hand a reply to its platform adapter, record the outcome, and never let a failed
send break the session (the reply stays in the outbox, offered again while the process lives
and at the next start)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Literal

import structlog

from hermes_gateway.bus import EventBus
from hermes_gateway.errors import AdapterError, PermanentAdapterError, StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.metrics import Metrics
from hermes_gateway.platform import Adapter
from hermes_gateway.store import Store

log = structlog.get_logger("hermes.delivery")
DeliveryResult = Literal["delivered", "permanent", "failed"]


class Delivery:
    """Sends `OutboundMessage`s and settles the inbox entries they answer."""

    # pauses before offering again a reply the platform could not take; the last one repeats
    redeliver_delays: tuple[float, ...] = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0)

    def __init__(
        self, adapters: Mapping[str, Adapter], store: Store, bus: EventBus, metrics: Metrics
    ) -> None:
        self.adapters = adapters
        self.store = store
        self.bus = bus
        self.metrics = metrics
        self._later: set[asyncio.Task[None]] = set()

    async def send(
        self,
        out: OutboundMessage,
        inbox_ids: Iterable[int | None] = (),
        *,
        outcome: str = "done",
        status: str = "answered",
        event: MessageEvent | None = None,
    ) -> bool:
        """Deliver ``out``; mark ``inbox_ids`` with ``status`` once the platform took it.

        Returns False when the platform could not take it. A permanent failure (the bot was
        blocked) settles the entries anyway, since retrying cannot help; a transient one (an
        outage longer than the adapter's own retries) is offered again in the background, and
        stays in the inbox for the replay at the next start meanwhile.
        """
        result = await self.deliver(out, outcome=outcome, event=event)
        ids = [i for i in inbox_ids if i is not None]
        if result == "failed" and ids:
            task = asyncio.create_task(self._redeliver(out, ids, status, event))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
        elif ids:
            await self._settle(ids, status if result == "delivered" else "undeliverable", out)
        return result == "delivered"

    async def _settle(self, ids: list[int], final: str, out: OutboundMessage) -> None:
        try:
            await self.store.mark(ids, final, reply=out.text)
        except StoreError as exc:
            log.error("delivery.settle_failed", error=str(exc), inbox_ids=ids)

    async def _redeliver(
        self, out: OutboundMessage, ids: list[int], status: str, event: MessageEvent | None
    ) -> None:
        """Until the platform takes it: a user must not wait for a restart (issue 9)."""
        attempt = 0
        while True:
            await asyncio.sleep(self.redeliver_delays[min(attempt, len(self.redeliver_delays) - 1)])
            attempt += 1
            result = await self.deliver(out, outcome="redelivered", event=event)
            if result != "failed":
                await self._settle(ids, status if result == "delivered" else "undeliverable", out)
                log.info("delivery.redelivered", attempts=attempt, result=result, inbox_ids=ids)
                return

    async def close(self) -> None:
        """Stop offering what is still undelivered: the replay at the next start sends it."""
        for task in self._later:
            task.cancel()
        await asyncio.gather(*self._later, return_exceptions=True)

    async def deliver(
        self, out: OutboundMessage, *, outcome: str = "done", event: MessageEvent | None = None
    ) -> DeliveryResult:
        """Hand ``out`` to its adapter and record the outcome; touches no inbox entry."""
        adapter = self.adapters.get(out.platform)
        result: DeliveryResult = "failed"
        if adapter is None:
            log.error("delivery.no_adapter", platform=out.platform)
        else:
            try:
                await adapter.send(out)
                result = "delivered"
            except PermanentAdapterError as exc:
                result = "permanent"
                log.warning("delivery.permanent_failure", platform=out.platform, error=str(exc))
            except AdapterError as exc:
                log.error("delivery.failed", platform=out.platform, error=str(exc))
            except Exception:
                log.exception("delivery.crashed", platform=out.platform)
        if result == "delivered":
            self.metrics.answered.labels(out.platform, outcome).inc(max(1, len(out.answers)))
            self.bus.emit(
                "response_sent", event, run_id=out.run_id, kind=out.kind, chars=len(out.text)
            )
        else:
            self.metrics.delivery_failures.labels(out.platform).inc()
            self.bus.emit("error", event, run_id=out.run_id, stage="delivery")
        return result
