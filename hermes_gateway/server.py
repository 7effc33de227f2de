"""`Gateway`: builds every part from the config and takes each message in (the `AdapterHost`).

Its startup -> main -> shutdown, signals and reload are `hermes_gateway/lifecycle.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import structlog
from aiohttp import web

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.agents.factory import AgentFactory
from hermes_gateway.agents.tool_host import GatewayToolHost
from hermes_gateway.cluster.build import coordinator
from hermes_gateway.cluster.carry import Carry
from hermes_gateway.cluster.leadership import ClusterLeader, SoleLeader
from hermes_gateway.cluster.ownership import Ownership
from hermes_gateway.cluster.peers import PeerLink, peer_address
from hermes_gateway.cluster.shares import ClusterShares, SoleShares
from hermes_gateway.config import Config, systemd_notify_socket
from hermes_gateway.control.admin import AdminRoutes
from hermes_gateway.control.app import ControlServer, ControlToken, Handler
from hermes_gateway.control.vitals import Vitals
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.commands import Commands, parse_command
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.pool import AgentPool
from hermes_gateway.core.probation import Probation
from hermes_gateway.core.quarantine import InboxRoutes
from hermes_gateway.core.replay import Replayer
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage, Sender, encodable
from hermes_gateway.guard.sdnotify import SystemdNotifier
from hermes_gateway.guard.sentinel import Sentinel
from hermes_gateway.guard.watchdog import LoopWatchdog
from hermes_gateway.lifecycle import Lifecycle
from hermes_gateway.live_config import LiveConfig
from hermes_gateway.memory.routes import MemoryRoutes
from hermes_gateway.memory.wiring import build_memory
from hermes_gateway.metrics import Metrics
from hermes_gateway.platform_spec import capabilities
from hermes_gateway.seam.access import Gatekeeper
from hermes_gateway.seam.pairing import PairingBook
from hermes_gateway.seam.peers import Follower, Peers
from hermes_gateway.seam.platform import (
    Adapter,
    Admitted,
    Leadership,
    RouteAccess,
    Shares,
    StreamSink,
    SubmitOutcome,
)
from hermes_gateway.store.store import Store

if TYPE_CHECKING:
    from hermes_gateway.dashboard import Dashboard
    from hermes_gateway.scheduler.service import SchedulerService

log = structlog.get_logger("hermes.gateway")
TOO_LONG = "Your message is too long ({n} characters; the limit is {limit}). Please shorten it."
NOT_STORED = (
    "I could not save your message (my database is not answering), so I have not acted on it; "
    "please send it again in a moment."
)
STORE_RETRY_S = 10.0  # cluster mode: how long a message whose inbox write failed waits for it
STORE_RETRY_PAUSE_S = 0.5


class Gateway(Lifecycle):
    """The daemon. Also the `AdapterHost` every adapter is built with."""

    def __init__(
        self, config: Config, config_path: str | None = None, *, first_start: bool = False
    ) -> None:
        self.live = LiveConfig(config)  # what every part reads; SIGHUP swaps what it holds
        self.config_path = config_path
        self.first_start = first_start  # nothing of the gateway's was there before this start
        self.should_exit = asyncio.Event()
        self.force_exit = False
        self.exit_code = 0
        self.closing = False
        self.started_at = time.time()
        self.metrics = Metrics()
        self.bus = EventBus(timeout=config.hook_timeout_s)
        self.store = Store(config.store_url)
        self.pairing = PairingBook(self.store)
        self.adapters: dict[str, Adapter] = {}
        self.gate = Gatekeeper(self.live, self.pairing, self.adapters)
        self._build_core(config, config_path)
        self._build_hands(config)
        self._build_faces(config)
        self.notifier = SystemdNotifier(systemd_notify_socket())
        self.watchdog: LoopWatchdog | None = None
        self.sentinel: Sentinel | None = None
        self._background: list[asyncio.Task[Any]] = []
        self.vitals.register_gauges()

    def _build_core(self, config: Config, config_path: str | None) -> None:
        """The pipeline: the pool, the agents' cache, delivery, the runner, and in cluster
        mode the ownership of sessions through leases."""
        self.pool = AgentPool(config.runner.workers)
        self.agent_factory = AgentFactory(config, config_path)
        self.llm = self.agent_factory.llm
        self.agents = AgentCache(
            self.agent_factory.make,
            self.store.history,
            max_size=config.runner.agent_cache_size,
            idle_ttl_s=config.runner.agent_idle_ttl_s,
        )
        self.delivery = Delivery(self.adapters, self.store, self.bus, self.metrics)
        self.ownership: Ownership | None = None  # cluster mode: sessions owned through leases
        if config.cluster.redis_url:
            self.ownership = Ownership(
                coordinator(config.cluster),
                self.store,
                self._route_here,
                lambda: Replayer(self.store, self.runner, self.delivery, self.adapters, self.live),
                self.delivery.owes,
                config.store.replay_max_age_s,
                refuse=self._refuse,
                notify=self._notify,
                tell_waiting_after_s=config.cluster.waiting_notice_s,
            )
        self.runner = GatewayRunner(
            config.runner,  # a restart's to change, like every section but access and log level
            store=self.store,
            bus=self.bus,
            pool=self.pool,
            agents=self.agents,
            delivery=self.delivery,
            metrics=self.metrics,
            stream_for=self._stream_for,
            probation=Probation(config.store.probation_calm_s),
            busy_policy_for=config.busy_policy_for,
            leases=None if self.ownership is None else self.ownership.keeping,
        )
        self.peers: Peers | None = None  # cluster mode: API requests carried to their owner
        if self.ownership is not None:
            link = PeerLink(self.ownership.coordinator, self._peer_url)
            route = self._route_here
            self.peers = Carry(link, self.ownership, self.store, self.runner.knows, route)
        self.leaders: dict[str, ClusterLeader] = {}  # singleton work led through the cluster
        self.shared: dict[str, ClusterShares] = {}  # intake split over the cluster (shards)

    def _build_hands(self, config: Config) -> None:
        """What the agent and the user act through: tools, memory, the chat commands."""
        self.tool_host = GatewayToolHost(
            runner=self.runner,
            delivery=self.delivery,
            store=self.store,
            adapters=self.adapters,
            vision=self.agent_factory.vision_llm,
            approval_timeout_s=config.tools.terminal.approval_timeout_s,
        )
        self.memory = build_memory(config, self.store, self.agent_factory.llm, self.runner)
        self.agent_factory.host = replace(self.tool_host.host, **self.memory.callables())
        self.agent_factory.owner = self.memory.owner
        if config.memory.auto_retain:
            self.runner.settler.on_turn = self.memory.turn_done
        self.commands = Commands(
            self.live,
            self.runner,
            self.store,
            self.delivery,
            self.bus,
            self.agents,
            self.pool,
            tool_host=self.tool_host,
        )

    def _build_faces(self, config: Config) -> None:
        """What operators see and drive: the control API, its admin, inbox and memory routes, the
        dashboard, the scheduler (with its own routes)."""
        self.vitals = Vitals(self)
        self.control_token = ControlToken(config.control.token, config.home_path)
        self.control = ControlServer(
            config.control,
            self.control_token,
            health=self.vitals.health,
            readiness=self.vitals.readiness,
            status=self.vitals.status,
            metrics=self.metrics.render,
        )
        self.admin = AdminRoutes(self.pairing, self.adapters, self.delivery)
        self.admin.mount(self.control.add_route)
        self.inbox = InboxRoutes(self.store, self.route)
        self.inbox.mount(self.control.add_route)
        MemoryRoutes(self.memory).mount(self.control.add_route)
        self.dashboard: Dashboard | None = None
        if config.dashboard.enabled:  # imported only then (its Jinja2 waits for a first page)
            from hermes_gateway.dashboard import Dashboard

            self.dashboard = Dashboard(self, config.dashboard)
            self.dashboard.mount(self.control)
        self.scheduler: SchedulerService | None = None
        if config.scheduler.enabled:
            from hermes_gateway.scheduler.service import SchedulerService

            self.scheduler = SchedulerService(self)
            if self.dashboard is not None:
                self.dashboard.jobs = self.scheduler.board  # the Jobs page appears

    # -- AdapterHost --------------------------------------------------------------------

    @property
    def config(self) -> Config:
        return self.live.now

    def add_route(
        self, method: str, path: str, handler: Handler, *, access: RouteAccess = "operator"
    ) -> None:
        self.control.add_route(method, path, handler, access=access)

    async def submit(
        self,
        event: MessageEvent,
        *,
        durable: bool = False,
        sender: Sender = "user",
        admitted: Admitted | None = None,
    ) -> SubmitOutcome:
        """Intake: admit, validate, persist to the inbox (dedupe), announce, route. ``durable``:
        take it only once its inbox row is written (see `AdapterHost.submit`)."""
        event = encodable(event)  # every platform's text enters here, admission's replies too
        if not await self.gate.admit(event, sender):  # default deny, whatever the adapter did
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
            if self.ownership is not None:
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

    async def route(self, event: MessageEvent, inbox_id: int | None) -> None:
        if self.ownership is not None:  # to the instance that owns the session
            await self.ownership.route(event, inbox_id)
        else:
            await self._route_here(event, inbox_id)

    async def _route_here(self, event: MessageEvent, inbox_id: int | None) -> None:
        command = parse_command(event.text)
        if command is not None:
            await self.commands.handle(command[0], command[1], event, inbox_id)
        else:
            await self.runner.dispatch(event, inbox_id)

    async def _refuse(
        self, event: MessageEvent, inbox_id: int | None, text: str, outcome: str
    ) -> None:
        """Cluster mode: a message this instance cannot run and whose reply cannot go
        elsewhere (the local API's open request) is answered with why, and settled; unless
        its adapter follows it to the session's owner (`_carry_back`)."""
        if outcome == "owned_elsewhere" and isinstance(self.adapters.get(event.platform), Follower):
            return
        out = OutboundMessage.to(event, text, "error", outcome=outcome)
        await self.delivery.send(out, [inbox_id], outcome=outcome, status="dropped", event=event)

    async def _notify(self, event: MessageEvent, text: str) -> None:
        """A notice about ``event`` that settles nothing (it is still to be answered)."""
        await self.delivery.send(OutboundMessage.to(event, text, "notice"), event=event)

    def _peer_url(self) -> str:
        """Where the other instances reach this one (read once the control port listens)."""
        control = self.config.control
        return self.config.cluster.peer_url or peer_address(control.host, self.control.port)

    async def writable(self) -> None:
        await self.store.circuit.wait_writable()

    async def history(self, session_key: str) -> list[dict[str, Any]]:
        ctx = self.agents.peek(session_key)
        if ctx is not None:
            return list(ctx.history)
        return await self.store.history(session_key)

    def leadership(self, role: str, slots: int = 0) -> Leadership:
        """One process leads every role; in a cluster a leader lease decides, one of ``slots``
        numbered ones if given (kept in `leaders` for `/status`)."""
        if self.ownership is None:
            return SoleLeader(role)
        leader = self.leaders.get(role)
        if leader is None:
            coordinator = self.ownership.coordinator
            leader = self.leaders[role] = ClusterLeader(coordinator, role, slots)
        return leader

    def shares(self, role: str, count: int) -> Shares:
        """One process serves every part; in a cluster each part is a leader lease (its
        leaders kept in `leaders`, the split in `shared`, for `/status`)."""
        if self.ownership is None:
            return SoleShares(count)
        coordinator = self.ownership.coordinator
        old = self.shared.get(role)
        for n in range(old.count if old is not None else 0):  # asked again with another count
            self.leaders.pop(f"{role}:{n}", None)
        shares = self.shared[role] = ClusterShares(coordinator, role, count, self._leader)
        return shares

    def _leader(self, role: str) -> ClusterLeader:
        assert self.ownership is not None
        leader = self.leaders[role] = ClusterLeader(self.ownership.coordinator, role)
        return leader

    async def remember_preview(self, event: MessageEvent, ref: str) -> None:
        with contextlib.suppress(StoreError):  # the preview goes on; only a replay misses it
            await self.store.remember_preview(event, ref)

    def _stream_for(self, event: MessageEvent) -> StreamSink | None:
        adapter = self.adapters.get(event.platform)
        return adapter.stream(event) if adapter is not None else None


__all__ = ["Gateway", "web"]
