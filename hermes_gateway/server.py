"""`Gateway`: the composition root. It builds every part from the config, each given what it
uses by its constructor (in an order that needs no part finished afterwards), and runs them
(`hermes_gateway/lifecycle.py`: startup -> main -> shutdown, signals and reload). Nothing
below it sees the gateway whole: adapters get the `Reception`, the faces the parts they read.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.agents.factory import AgentFactory, mcp_manager, model_clients
from hermes_gateway.agents.tool_host import GatewayToolHost
from hermes_gateway.browser import browser_pool
from hermes_gateway.cluster.roles import Roles
from hermes_gateway.config import Config, systemd_notify_socket
from hermes_gateway.config.live import LiveConfig
from hermes_gateway.control.admin import AdminRoutes
from hermes_gateway.control.app import ControlServer, ControlToken
from hermes_gateway.control.vitals import VitalParts, Vitals
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.commands import Commands
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.pool import AgentPool
from hermes_gateway.core.probation import Probation
from hermes_gateway.core.quarantine import InboxRoutes
from hermes_gateway.core.reception import Here, Reception
from hermes_gateway.core.replay import Replayer
from hermes_gateway.core.run import LiveRuns
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.core.sizing import fairness, pool_size
from hermes_gateway.events import MessageEvent
from hermes_gateway.lifecycle import Lifecycle, LifecycleParts
from hermes_gateway.liveness.sdnotify import SystemdNotifier
from hermes_gateway.media_in.wiring import inbound_media
from hermes_gateway.memory.routes import MemoryRoutes
from hermes_gateway.memory.wiring import build_memory
from hermes_gateway.metrics import Metrics
from hermes_gateway.platforms.access import Gatekeeper
from hermes_gateway.platforms.adapter import Adapter, StreamSink
from hermes_gateway.platforms.pairing import PairingBook
from hermes_gateway.platforms.peers import Peers
from hermes_gateway.store.store import Store
from hermes_gateway.traces import build_tracer
from tools.host import ToolHost

if TYPE_CHECKING:
    from hermes_gateway.cluster.ownership import Ownership
    from hermes_gateway.dashboard import Dashboard
    from hermes_gateway.mcp.manager import McpManager
    from hermes_gateway.scheduler.job_service import JobService
    from hermes_gateway.scheduler.scheduler import Scheduler
    from hermes_gateway.scheduler.service import SchedulerService

log = structlog.get_logger("hermes.gateway")


class Gateway(Lifecycle):
    """The daemon: the parts, built here, and their lifecycle."""

    def __init__(
        self, config: Config, config_path: str | None = None, *, first_start: bool = False
    ) -> None:
        self.live = LiveConfig(config)  # what every part reads; SIGHUP swaps what it holds
        self.first_start = first_start  # nothing of the gateway's was there before this start
        self.intake_closed = asyncio.Event()  # the adapters have stopped: nothing new is taken
        self.started_at = time.time()
        self.metrics = Metrics()
        self.tracer = build_tracer(config.observability.traces, self.metrics, self._instance_id)
        self.bus = EventBus(timeout=config.hook_timeout_s)
        self.store = Store(config.store_url)
        self.pairing = PairingBook(self.store)
        self.adapters: dict[str, Adapter] = {}  # filled at the start, one per enabled platform
        self.gate = Gatekeeper(self.live, self.pairing, self.adapters)
        workers = pool_size(config)
        self.pool = AgentPool(workers, fairness(config.runner, workers))
        self.delivery = Delivery(
            self.adapters, self.store, self.bus, self.metrics, tracer=self.tracer
        )
        self._build_hands(config, config_path)
        self._build_core(config)
        self._build_faces(config)
        self.notifier = SystemdNotifier(systemd_notify_socket())
        super().__init__(self._lifecycle_parts(), config_path)  # what it starts and stops
        self.vitals.register_gauges()

    def _build_hands(self, config: Config, config_path: str | None) -> None:
        """What the agents act through, built before them: the model clients, the runs in
        progress (read by tools and memory), the scheduler's job_service, the tools' host, memory;
        then the agents' factory and cache."""
        clients = model_clients(config, config_path, self.pool.workers)
        self.llm = clients.llm
        self.runs = LiveRuns()
        self.job_service: JobService | None = None
        if config.scheduler.enabled:
            from hermes_gateway.scheduler.service import LaterKicks, build_job_service

            self.job_service = build_job_service(
                self.live, self.store, LaterKicks(self._job_scheduler)
            )
        self.tool_host = GatewayToolHost(
            runs=self.runs,
            delivery=self.delivery,
            store=self.store,
            adapters=self.adapters,
            vision=clients.vision,
            approval_timeout_s=config.tools.terminal.approval_timeout_s,
            jobs=self.job_service,
            browser=browser_pool(config),
        )
        self.memory = build_memory(config, self.store, self.llm, self.runs)
        self.mcp: McpManager | None = mcp_manager(config)  # unless mcp.servers names one: None
        self.agent_factory = AgentFactory(
            config,
            config_path,
            clients=clients,
            host=ToolHost.provided_by(self.tool_host, self.memory),
            owner=self.memory.owner,
            extra=self.mcp,
        )
        self.agents = AgentCache(
            self.agent_factory.make,
            self.store.history,
            max_size=config.runner.agent_cache_size,
            idle_ttl_s=config.runner.agent_idle_ttl_s,
        )

    def _build_core(self, config: Config) -> None:
        """The pipeline: in cluster mode the ownership of sessions through leases (the
        runner takes its leases), the runner, the chat commands, this process's own route,
        and in cluster mode the carrying of API requests to their session's owner."""
        self.ownership = self._ownership(config)  # cluster mode: sessions owned through leases
        self.media = inbound_media(config, self.adapters)  # voice notes and images, as runs start
        self.runner = self._runner(config)
        self.commands = Commands(
            self.live,
            self.runner,
            self.store,
            self.delivery,
            self.bus,
            self.agents,
            self.pool,
            tool_host=self.tool_host,
            jobs=self.job_service,
        )
        self.here = Here(self.commands, self.runner, self.delivery, self.adapters)
        self.peers: Peers | None = None  # cluster mode: API requests carried to their owner
        if self.ownership is not None:
            from hermes_gateway.cluster.carry import Carry
            from hermes_gateway.cluster.peers import PeerLink

            link = PeerLink(self.ownership.coordinator, self._peer_url)
            route = self.here.route
            self.peers = Carry(link, self.ownership, self.store, self.runner.knows, route)
        cluster = self.ownership.coordinator if self.ownership is not None else None
        self.roles = Roles(cluster)  # singleton work and intake shares, led here or leased
        self.route = self.ownership.route if self.ownership is not None else self.here.route
        self.inbox = InboxRoutes(self.store, self.route)
        self.scheduler = self._scheduler()

    def _ownership(self, config: Config) -> Ownership | None:
        """Cluster mode's ownership of sessions (None alone), imported only then like redis-py.
        Built before the runner, which takes its leases: what it routes to is built after, so
        it is reached through these calls, made only once the gateway runs."""
        if not config.cluster.redis_url:
            return None
        from hermes_gateway.cluster.build import coordinator
        from hermes_gateway.cluster.ownership import Ownership

        return Ownership(
            coordinator(config.cluster),
            self.store,
            lambda event, inbox_id: self.here.route(event, inbox_id),
            lambda: Replayer(
                self.store, self.runner, self.delivery, self.adapters, self.live, self.tracer
            ),
            self.delivery.owes,
            config.store.replay_max_age_s,
            refuse=lambda *args: self.here.refuse(*args),
            notify=lambda event, text: self.here.notify(event, text),
            tell_waiting_after_s=config.cluster.waiting_notice_s,
        )

    def _runner(self, config: Config) -> GatewayRunner:
        return GatewayRunner(
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
            runs=self.runs,
            on_turn=self.memory.turn_done if config.memory.auto_retain else None,
            leases=None if self.ownership is None else self.ownership.keeping,
            job_ledger=None if self.job_service is None else self.job_service.ledger,
            media=self.media,
            tracer=self.tracer,
        )

    def _scheduler(self) -> SchedulerService | None:
        """The scheduler's service, when jobs are on: imported only then."""
        if self.job_service is None:
            return None
        from hermes_gateway.scheduler.service import SchedulerService

        live = self.live
        return SchedulerService(
            self.job_service,
            turns=self.runner,  # a job's run is a turn of its session, like a message
            metrics=self.metrics,
            workers=self.pool.workers,
            per_user=lambda: live.now.runner.group_sessions_per_user,
            tracer=self.tracer,
        )

    def _instance_id(self) -> str:
        """This instance's id, as the cluster names it (its spans carry it when traces are on:
        imported only then, as cluster mode's parts are)."""
        from hermes_gateway.cluster.build import instance_id

        return instance_id(self.live.now.cluster)

    def _build_faces(self, config: Config) -> None:
        """What operators see and drive: the vitals, the control API with its admin, inbox,
        memory and scheduler routes, the dashboard; and the `Reception` adapters get."""
        self.vitals = Vitals(self._vital_parts())
        self.control_token = ControlToken(config.control.token, config.home_path)
        self.control = ControlServer(
            config.control,
            self.control_token,
            health=self.vitals.health,
            readiness=self.vitals.readiness,
            status=self.vitals.status,
            metrics=self.metrics.render,
        )
        self.reception = Reception(
            self.live,
            gate=self.gate,
            store=self.store,
            metrics=self.metrics,
            bus=self.bus,
            delivery=self.delivery,
            agents=self.agents,
            route=self.route,
            notify=self.here.notify,
            roles=self.roles,
            add_route=self.control.add_route,
            closed=self.intake_closed,
            adapters=self.adapters,
            peers=self.peers,
            tracer=self.tracer,
        )
        self.admin = AdminRoutes(self.pairing, self.adapters, self.delivery)
        self.admin.mount(self.control.add_route)
        self.inbox.mount(self.control.add_route)
        MemoryRoutes(self.memory).mount(self.control.add_route)
        if self.scheduler is not None:
            self.scheduler.mount(self.control.add_route)
        self.dashboard: Dashboard | None = None
        if config.dashboard.enabled:  # imported only then (its Jinja2 waits for a first page)
            self.dashboard = self._dashboard(config)
            self.dashboard.mount(self.control)

    def _lifecycle_parts(self) -> LifecycleParts:
        return LifecycleParts(
            live=self.live,
            first_start=self.first_start,
            intake_closed=self.intake_closed,
            metrics=self.metrics,
            bus=self.bus,
            store=self.store,
            pairing=self.pairing,
            pool=self.pool,
            agent_factory=self.agent_factory,
            agents=self.agents,
            adapters=self.adapters,
            gate=self.gate,
            delivery=self.delivery,
            runner=self.runner,
            ownership=self.ownership,
            reception=self.reception,
            tool_host=self.tool_host,
            memory=self.memory,
            mcp=self.mcp,
            inbox=self.inbox,
            dashboard=self.dashboard,
            control=self.control,
            scheduler=self.scheduler,
            notifier=self.notifier,
            media=self.media,
            tracer=self.tracer,
        )

    def _vital_parts(self) -> VitalParts:
        return VitalParts(
            live=self.live,
            started_at=self.started_at,
            metrics=self.metrics,
            llm=self.llm,
            store=self.store,
            adapters=self.adapters,
            runner=self.runner,
            pool=self.pool,
            agents=self.agents,
            inbox=self.inbox,
            memory=self.memory,
            scheduler=self.scheduler,
            ownership=self.ownership,
            roles=self.roles,
            closing=self.intake_closed.is_set,
            watchdog=lambda: self.watchdog,
            mcp=self.mcp,
        )

    def _dashboard(self, config: Config) -> Dashboard:
        from hermes_gateway.dashboard.app import Dashboard, DashboardParts

        parts = DashboardParts(
            live=self.live,
            started_at=self.started_at,
            metrics=self.metrics,
            store=self.store,
            runner=self.runner,
            pool=self.pool,
            pairing=self.pairing,
            inbox=self.inbox,
            commands=self.commands,
            admin=self.admin,
            adapters=self.adapters,
            vitals=self.vitals,
            control_token=self.control_token,
            port=lambda: self.control.port,
            history=self.reception.history,
        )
        jobs_page = self.scheduler.jobs_page if self.scheduler is not None else None
        return Dashboard(parts, config.dashboard, jobs=jobs_page)  # its Jobs page with a scheduler

    def _job_scheduler(self) -> Scheduler:
        """The job service's way to the scheduler, built after it (see `LaterKicks`)."""
        assert self.scheduler is not None
        return self.scheduler.scheduler

    def _peer_url(self) -> str:
        """Where the other instances reach this one (read once the control port listens)."""
        from hermes_gateway.cluster.peers import peer_address

        control = self.config.control
        return self.config.cluster.peer_url or peer_address(control.host, self.control.port)

    def _stream_for(self, event: MessageEvent) -> StreamSink | None:
        adapter = self.adapters.get(event.platform)
        return adapter.stream(event) if adapter is not None else None


__all__ = ["Gateway", "web"]
