"""Delivery: hand a reply to its platform adapter, record the outcome, and never let a failed
send break the session (the reply stays in the outbox for the next start)."""

from __future__ import annotations

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

    def __init__(
        self, adapters: Mapping[str, Adapter], store: Store, bus: EventBus, metrics: Metrics
    ) -> None:
        self.adapters = adapters
        self.store = store
        self.bus = bus
        self.metrics = metrics

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
        blocked) settles the entries anyway, since retrying cannot help; a transient one leaves
        them for the outbox replay at the next start.
        """
        result = await self.deliver(out, outcome=outcome, event=event)
        ids = [i for i in inbox_ids if i is not None]
        if result != "failed" and ids:
            final = status if result == "delivered" else "undeliverable"
            try:
                await self.store.mark(ids, final, reply=out.text)
            except StoreError as exc:
                log.error("delivery.settle_failed", error=str(exc), inbox_ids=ids)
        return result == "delivered"

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
