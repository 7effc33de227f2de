"""`Reception`: the `AdapterHost` every adapter is built with (each message taken in: admitted,
checked, stored in the inbox, routed), and `Here`, the way to this process's own commands and
runner that the cluster's ownership routes to."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Literal, Protocol

import structlog

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.config import Config
from hermes_gateway.config.live import LiveConfig
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.commands import Commands, parse_command
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.errors import PermanentAdapterError, StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage, Sender, encodable
from hermes_gateway.metrics import Metrics
from hermes_gateway.platform_spec import capabilities
from hermes_gateway.platforms.access import Gatekeeper
from hermes_gateway.platforms.adapter import (
    Adapter,
    Admitted,
    Leadership,
    RouteAccess,
    Shares,
    SubmitOutcome,
)
from hermes_gateway.platforms.peers import Follower, Peers
from hermes_gateway.store.store import Store
from hermes_gateway.traces import OFF, Tracer

log = structlog.get_logger("hermes.gateway")
TOO_LONG = "Your message is too long ({n} characters; the limit is {limit}). Please shorten it."
NOT_STORED = (
    "I could not save your message (my database is not answering), so I have not acted on it; "
    "please send it again in a moment."
)
STORE_RETRY_S = 10.0  # cluster mode: how long a message whose inbox write failed waits for it
STORE_RETRY_PAUSE_S = 0.5
Route = Callable[[MessageEvent, int | None], Awaitable[None]]
AddRoute = Callable[..., None]  # `ControlServer.add_route`


class Roles(Protocol):
    """The singleton work and intake shares this process leads (`cluster.roles.Roles`)."""

    @property
    def clustered(self) -> bool: ...

    def leadership(self, role: str, slots: int = 0) -> Leadership: ...

    def shares(self, role: str, count: int) -> Shares: ...


class Here:
    """This process's own way for a message: a chat command, else the runner."""

    def __init__(
        self,
        commands: Commands,
        runner: GatewayRunner,
        delivery: Delivery,
        adapters: Mapping[str, Adapter],
    ) -> None:
        self.commands = commands
        self.runner = runner
        self.delivery = delivery
        self.adapters = adapters

    async def route(self, event: MessageEvent, inbox_id: int | None) -> None:
        command = parse_command(event.text)
        if command is not None:
            await self.commands.handle(command[0], command[1], event, inbox_id)
        else:
            await self.runner.dispatch(event, inbox_id)

    async def refuse(
        self, event: MessageEvent, inbox_id: int | None, text: str, outcome: str
    ) -> None:
        """Cluster mode: a message this instance cannot run and whose reply cannot go
        elsewhere (the local API's open request) is answered with why, and settled; unless
        its adapter follows it to the session's owner (`Reception.submit`)."""
        if outcome == "owned_elsewhere" and isinstance(self.adapters.get(event.platform), Follower):
            return
        out = OutboundMessage.to(event, text, "error", outcome=outcome)
        await self.delivery.send(out, [inbox_id], outcome=outcome, status="dropped", event=event)

    async def notify(self, event: MessageEvent, text: str) -> None:
        """A notice about ``event`` that settles nothing (it is still to be answered)."""
        await self.delivery.send(OutboundMessage.to(event, text, "notice"), event=event)


class Reception:
    """Implements `AdapterHost`. ``route``: to the instance that owns the session (cluster) or
    `Here.route`; ``closed``: set once the adapters have stopped (shutdown)."""

    def __init__(
        self,
        live: LiveConfig,
        *,
        gate: Gatekeeper,
        store: Store,
        metrics: Metrics,
        bus: EventBus,
        delivery: Delivery,
        agents: AgentCache,
        route: Route,
        notify: Callable[[MessageEvent, str], Awaitable[None]],
        roles: Roles,
        add_route: AddRoute,
        closed: asyncio.Event,
        adapters: Mapping[str, Adapter],
        peers: Peers | None = None,
        tracer: Tracer = OFF,
    ) -> None:
        self.live = live
        self.gate = gate
        self.store = store
        self.metrics = metrics
        self.bus = bus
        self.delivery = delivery
        self.agents = agents
        self.route = route
        self._notify = notify
        self.roles = roles
        self._add_route = add_route
        self.closed = closed
        self.adapters = adapters
        self.peers = peers  # cluster mode: API requests carried to their session's owner
        self.tracer = tracer

    @property
    def config(self) -> Config:
        return self.live.now

    @property
    def closing(self) -> bool:
        return self.closed.is_set()

    def add_route(
        self, method: str, path: str, handler: Any, *, access: RouteAccess = "operator"
    ) -> None:
        self._add_route(method, path, handler, access=access)

    async def submit(
        self,
        event: MessageEvent,
        *,
        durable: bool = False,
        sender: Sender = "user",
        admitted: Admitted | None = None,
    ) -> SubmitOutcome:
        """`_submit` under the message's root span, which its run's span continues."""
        with self.tracer.message(event) as span:
            if trace := self.tracer.traceparent():  # kept with it: its run may be elsewhere
                event = replace(event, trace=trace)
            outcome = await self._submit(event, durable, sender, admitted)
            span.set("hermes.intake", outcome)
            return outcome

    async def _submit(
        self, event: MessageEvent, durable: bool, sender: Sender, admitted: Admitted | None
    ) -> SubmitOutcome:
        """Intake: admit, validate, persist to the inbox (dedupe), announce, route. ``durable``:
        take it only once its inbox row is written (see `AdapterHost.submit`)."""
        event = encodable(event)  # every platform's text enters here, admission's replies too
        with self.tracer.leaf("admission"):  # a pairing reply is the message's child
            allowed = await self.gate.admit(event, sender)
        if not allowed:  # default deny, whatever the adapter did
            return "refused"
        if admitted is not None:
            event = await admitted(event)
        if self.closing:
            return "closed"
        if durable and not self.store.circuit.writable:
            return "unavailable"  # not even tried: it stays with its platform
        if not event.text.strip() and not event.attachments:
            return "empty"
        limit = self.config.runner.max_input_chars
        if len(event.text) > limit:
            self.metrics.dropped.labels(event.platform, "too_long").inc()
            text = TOO_LONG.format(n=len(event.text), limit=limit)
            await self.delivery.send(OutboundMessage.to(event, text, "error"), event=event)
            return "too_long"
        with self.tracer.leaf("inbox.write"):
            inbox_id = await self._store(event, durable)
        if isinstance(inbox_id, str):
            if inbox_id == "duplicate":
                self.metrics.duplicates.labels(event.platform).inc()
                log.debug("message.duplicate", message_id=event.message_id)
            return inbox_id
        self.metrics.received.labels(event.platform).inc()
        self.bus.emit("message_received", event)
        await self.route(event, inbox_id)
        if self.peers is not None and inbox_id is not None:
            self._carry_back(event, inbox_id)
        return "accepted"

    def _carry_back(self, event: MessageEvent, inbox_id: int) -> None:
        """Cluster mode: a request waiting on its own connection (the local API) is followed to
        wherever its session runs, now or after its lease moves, for its answer to come back."""
        adapter = self.adapters.get(event.platform)
        if isinstance(adapter, Follower):
            adapter.follow(event, inbox_id)

    async def _store(
        self, event: MessageEvent, durable: bool
    ) -> int | Literal["duplicate", "unavailable"] | None:
        """The message's inbox id; None: taken unstored (one process, a platform that does
        not redeliver: answered unpersisted rather than not at all)."""
        try:
            inbox_id = await self.store.accept(event)
        except StoreError as exc:
            if durable:  # its platform keeps it and offers it again once the store can write
                log.error("inbox.write_failed", error=str(exc), kept_by=event.platform)
                return "unavailable"
            if self.roles.clustered:
                return await self._store_again(event, exc)
            log.error("inbox.write_failed", error=str(exc), session_key=event.session_key)
            return None
        return "duplicate" if inbox_id is None else inbox_id

    async def _store_again(
        self, event: MessageEvent, exc: StoreError
    ) -> int | Literal["duplicate", "unavailable"]:
        """Cluster mode, a platform that does not redeliver: run unstored, the message would
        die with this instance unseen by the others (nothing in the inbox to take over). So
        the write is tried again while the store comes back, for `STORE_RETRY_S`; then the
        user is told to send it again ("duplicate": an earlier try did land, and the takeover
        sweep answers it)."""
        log.warning("inbox.write_retried", error=str(exc), session_key=event.session_key)
        deadline = time.monotonic() + STORE_RETRY_S
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.store.circuit.wait_writable(), left)
            await asyncio.sleep(min(STORE_RETRY_PAUSE_S, left))
            try:
                inbox_id = await self.store.accept(event)
            except StoreError as again:
                exc = again
                continue
            return "duplicate" if inbox_id is None else inbox_id
        log.error("inbox.write_failed", error=str(exc), session_key=event.session_key, told=True)
        if capabilities(event.platform).can_push:  # else its open request says so
            await self._notify(event, NOT_STORED)
        return "unavailable"

    async def writable(self) -> None:
        await self.store.circuit.wait_writable()

    async def history(self, session_key: str) -> list[dict[str, Any]]:
        ctx = self.agents.peek(session_key)
        if ctx is not None:
            return list(ctx.history)
        return await self.store.history(session_key)

    def leadership(self, role: str, slots: int = 0) -> Leadership:
        return self.roles.leadership(role, slots)

    def shares(self, role: str, count: int) -> Shares:
        return self.roles.shares(role, count)

    async def relay(self, message: OutboundMessage) -> None:
        adapter = self.adapters.get(message.platform)
        if adapter is None:
            raise PermanentAdapterError(f"platform {message.platform!r} is not running here")
        await adapter.send(message)

    async def remember_preview(self, event: MessageEvent, ref: str) -> None:
        with contextlib.suppress(StoreError):  # the preview goes on; only a replay misses it
            await self.store.remember_preview(event, ref)
