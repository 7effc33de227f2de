"""`Gateway`: builds every part from the config and runs startup -> main -> shutdown.

Shutdown order: stop intake -> drain with timeout -> interrupt agents -> stop the pool ->
close adapters -> flush the store. SIGTERM/SIGINT set `should_exit`; a second one forces.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from hermes_gateway import __version__
from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.agents.factory import AgentFactory, confine_tools
from hermes_gateway.agents.tool_host import GatewayToolHost
from hermes_gateway.cluster.build import coordinator
from hermes_gateway.config import Config, config_path, systemd_notify_socket
from hermes_gateway.control.admin import AdminRoutes
from hermes_gateway.control.app import ControlServer, Handler
from hermes_gateway.control.vitals import Vitals
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.commands import Commands, parse_command
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.hooks import collect_hooks, install_hooks
from hermes_gateway.core.housekeeping import Housekeeper
from hermes_gateway.core.ownership import Ownership
from hermes_gateway.core.pool import AgentPool
from hermes_gateway.core.quarantine import InboxRoutes
from hermes_gateway.core.replay import Replayer
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.dashboard import Dashboard
from hermes_gateway.errors import ConfigError, StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage, Sender, encodable
from hermes_gateway.guard.sdnotify import SystemdNotifier
from hermes_gateway.guard.sentinel import Sentinel
from hermes_gateway.guard.watchdog import LoopWatchdog
from hermes_gateway.live_config import LiveConfig
from hermes_gateway.memory.wiring import announce_legacy, build_memory
from hermes_gateway.metrics import Metrics
from hermes_gateway.seam.access import AccessPolicy, Gatekeeper
from hermes_gateway.seam.pairing import PairingBook
from hermes_gateway.seam.platform import (
    Adapter,
    Admitted,
    StreamSink,
    SubmitOutcome,
    adapter_class,
    load_adapter,
)
from hermes_gateway.store.store import Store

if TYPE_CHECKING:
    from hermes_gateway.scheduler.service import SchedulerService

log = structlog.get_logger("hermes.gateway")
TOO_LONG = "Your message is too long ({n} characters; the limit is {limit}). Please shorten it."


class Gateway:
    """The daemon. Also the `AdapterHost` every adapter is built with."""

    def __init__(self, config: Config, config_path: str | None = None) -> None:
        self.live = LiveConfig(config)  # what every part reads; SIGHUP swaps what it holds
        self.config_path = config_path
        self.should_exit = asyncio.Event()
        self.force_exit = False
        self.exit_code = 0
        self.closing = False
        self.started_at = time.time()
        self.metrics = Metrics()
        self.bus = EventBus(timeout=config.hook_timeout_s)
        self.store = Store(config.store_url)
        self.pairing = PairingBook(self.store)
        self.pool = AgentPool(config.runner.workers)
        self.agent_factory = AgentFactory(config, config_path)
        self.llm = self.agent_factory.llm
        self.agents = AgentCache(
            self.agent_factory.make,
            self.store.history,
            max_size=config.runner.agent_cache_size,
            idle_ttl_s=config.runner.agent_idle_ttl_s,
        )
        self.adapters: dict[str, Adapter] = {}
        self.gate = Gatekeeper(self.live, self.pairing, self.adapters)
        self.delivery = Delivery(self.adapters, self.store, self.bus, self.metrics)
        self.runner = GatewayRunner(
            config.runner,  # a restart's to change, like every section but access and log level
            store=self.store,
            bus=self.bus,
            pool=self.pool,
            agents=self.agents,
            delivery=self.delivery,
            metrics=self.metrics,
            stream_for=self._stream_for,
        )
        self.ownership: Ownership | None = None  # cluster mode: sessions owned through leases
        if config.cluster.redis_url:
            self.ownership = Ownership(
                coordinator(config.cluster),
                self.store,
                self.runner,
                self._route_here,
                lambda: Replayer(self.store, self.runner, self.delivery, self.adapters, self.live),
                self.delivery.owes,
                config.store.replay_max_age_s,
                refuse=self._refuse,
                notify=self._notify,
            )
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
        self.vitals = Vitals(self)
        self.control = ControlServer(
            config.control,
            health=self.vitals.health,
            readiness=self.vitals.readiness,
            status=self.vitals.status,
            metrics=self.metrics.render,
        )
        self.admin = AdminRoutes(self.pairing, self.adapters, self.delivery)
        self.admin.mount(self.control.add_route)
        self.inbox = InboxRoutes(self.store, self.route)
        self.inbox.mount(self.control.add_route)
        self.dashboard: Dashboard | None = None
        if config.dashboard.enabled:
            self.dashboard = Dashboard(self, config.dashboard)
            self.dashboard.mount(self.control)
        self.scheduler: SchedulerService | None = None
        if config.scheduler.enabled:
            from hermes_gateway.scheduler.service import SchedulerService

            self.scheduler = SchedulerService(self)
        self.notifier = SystemdNotifier(systemd_notify_socket())
        self.watchdog: LoopWatchdog | None = None
        self.sentinel: Sentinel | None = None
        self._background: list[asyncio.Task[Any]] = []
        self.vitals.register_gauges()

    # -- AdapterHost --------------------------------------------------------------------

    @property
    def config(self) -> Config:
        return self.live.now

    def add_route(self, method: str, path: str, handler: Handler, *, public: bool = False) -> None:
        self.control.add_route(method, path, handler, public=public)

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
        try:
            inbox_id = await self.store.accept(event)
            if inbox_id is None:
                self.metrics.duplicates.labels(event.platform).inc()
                log.debug("message.duplicate", message_id=event.message_id)
                return "duplicate"
        except StoreError as exc:
            if durable:  # its platform keeps it and offers it again once the store can write
                log.error("inbox.write_failed", error=str(exc), kept_by=event.platform)
                return "unavailable"
            # no platform keeps it for us: answer it unpersisted rather than not at all
            log.error("inbox.write_failed", error=str(exc), session_key=event.session_key)
            inbox_id = None
        self.metrics.received.labels(event.platform).inc()
        self.bus.emit("message_received", event)
        await self.route(event, inbox_id)
        return "accepted"

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
        elsewhere (the local API's open request) is answered with why, and settled."""
        out = OutboundMessage.to(event, text, "error", outcome=outcome)
        await self.delivery.send(out, [inbox_id], outcome=outcome, status="dropped", event=event)

    async def _notify(self, event: MessageEvent, text: str) -> None:
        """A notice about ``event`` that settles nothing (it is still to be answered)."""
        await self.delivery.send(OutboundMessage.to(event, text, "notice"), event=event)

    async def writable(self) -> None:
        await self.store.circuit.wait_writable()

    def access_for(self, platform: str) -> AccessPolicy | None:
        """A platform's access rules; None where the core checks none (the local API)."""
        return self.gate.policy(platform)

    async def history(self, session_key: str) -> list[dict[str, Any]]:
        ctx = self.agents.peek(session_key)
        if ctx is not None:
            return list(ctx.history)
        return await self.store.history(session_key)

    async def remember_preview(self, event: MessageEvent, ref: str) -> None:
        with contextlib.suppress(StoreError):  # the preview goes on; only a replay misses it
            await self.store.remember_preview(event, ref)

    def _stream_for(self, event: MessageEvent) -> StreamSink | None:
        adapter = self.adapters.get(event.platform)
        return adapter.stream(event) if adapter is not None else None

    # -- lifecycle ----------------------------------------------------------------------

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_exit, sig)
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload(), "reload"))
        try:
            try:
                await self.startup()
            except Exception as exc:  # the log must not end on a clean "stopped" line
                log.error("gateway.start_failed", error=str(exc), error_type=type(exc).__name__)
                self.exit_code = -1  # the CLI picks the real code from the exception
                raise
            await self.should_exit.wait()
        finally:
            await self.shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        return self.exit_code

    def handle_exit(self, sig: int = signal.SIGTERM) -> None:
        if self.should_exit.is_set():
            log.warning("gateway.force_exit", signal=signal.Signals(sig).name)
            self.force_exit = True
            return
        log.info("gateway.stopping", signal=signal.Signals(sig).name)
        self.should_exit.set()

    async def reload(self) -> None:
        """SIGHUP: take new access rules and log level from the config file; sessions, runs
        and connections are untouched (other keys need a restart)."""
        if await self.live.reload(self.config_path):
            self.gate.reconfigure()  # the one part that derives state

    async def _listen(self) -> None:
        """Open the control port; an address we cannot listen on is the operator's to fix, so
        it is a configuration error (exit 78: systemd must not restart into the same wall)."""
        try:
            await self.control.start()
        except OSError as exc:
            where = f"{self.config.control.host}:{self.config.control.port}"
            raise ConfigError(
                "control.port", f"cannot listen on {where}: {exc.strerror or exc}"
            ) from None

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self.tool_host.bind(loop)
        self.memory.bind(loop)
        self.watchdog = LoopWatchdog(loop, self.config.watchdog, self.metrics, self.notifier)
        self.watchdog.start()
        self.sentinel = Sentinel.for_config(loop, self.config)  # sees what a thread cannot
        self.sentinel.start()
        await asyncio.to_thread(self._prepare_dirs)
        # tool modules are imported off the loop, before the first agent needs them
        await asyncio.to_thread(
            lambda: [self.agent_factory.toolset(p) for p in self.config.platforms.enabled()]
        )
        hooks = await asyncio.to_thread(
            collect_hooks, self.config.hooks, self.config.home_path / "hooks"
        )
        install_hooks(self.bus, hooks)
        await self.store.open()
        if self.memory.service is not None:
            await self.memory.service.archive.open()  # pgvector or not, found once, here
        self.memory.legacy = await announce_legacy(self.config.home_path, self.config.memory.scope)
        await asyncio.to_thread(confine_tools, self.config, self.config_path)
        await self.pairing.load()
        replayer = Replayer(self.store, self.runner, self.delivery, self.adapters, self.live)
        if self.ownership is None:  # in a cluster each session is replayed under its lease
            await replayer.load()  # before intake: what this run takes is not a leftover
        await self.inbox.load()  # what that quarantined, and what earlier starts did
        for name in self.config.platforms.enabled():
            cls = await asyncio.to_thread(adapter_class, name)  # SDK imports stay off the loop
            self.adapters[name] = load_adapter(name, self, cls)
        if self.dashboard is not None:
            await self.dashboard.start()
        await self._listen()
        for name, adapter in self.adapters.items():
            await adapter.start()
            log.info("adapter.started", platform=name)
        if self.ownership is None:
            self._spawn(replayer.run(), "replay")
        else:  # its first sweep takes over the leftovers of sessions no instance owns
            await self.ownership.start()
        self._spawn(Housekeeper(self.live, self.agents, self.store).run(), "housekeeping")
        if self.scheduler is not None:  # adapters up: its answers can go out
            await self.scheduler.start(self._spawn)
        self._spawn(self._warm_up(), "warm-up")
        self.notifier.notify("READY=1")
        self.bus.emit("gateway_startup", session_key="", version=__version__)
        log.info(
            "gateway.ready",
            version=__version__,
            port=self.control.port,
            platforms=list(self.adapters),
            model=self.config.model.name,
            workers=self.config.runner.workers,
            home=str(self.config.home_path),
            config=str(config_path(self.config_path) or "built-in defaults"),
        )
        if not self.agent_factory.llm.configured:
            log.warning(
                "model.not_configured",
                hint="every chat is answered with how to set one: put model.api_key (or "
                "OPENAI_API_KEY in <home>/gateway.env) or a local model.base_url in the config",
            )

    async def shutdown(self) -> None:
        self.notifier.notify("STOPPING=1")
        self.bus.emit("gateway_shutdown", session_key="")
        # stop intake first: anything an adapter fetched meanwhile still lands in the inbox
        for adapter in self.adapters.values():
            await _quietly(adapter.stop(), "adapter.stop")
        self.closing = True
        if self.scheduler is not None:  # no new job runs; running ones are recorded stopped
            await _quietly(self.scheduler.stop(), "scheduler.stop")
        drain = 0.0 if self.force_exit else self.config.runner.drain_timeout_s
        drained = await self._drain(drain)
        if not drained:
            log.warning("gateway.drain_timeout", seconds=drain)
        await self.runner.interrupt_all()
        if self.ownership is not None:  # the leases go at once: another instance takes over
            await self.ownership.close()
        await self.delivery.close()  # undelivered replies wait in the inbox for the next start
        await asyncio.to_thread(self.pool.shutdown)
        if self.memory.service is not None:
            await self.memory.service.close()  # auto-retains in flight; before the store closes
        for task in self._background:
            task.cancel()
        if self._background:
            # let a cancelled store.prune unwind before the engine is disposed: disposing it
            # under a live aiosqlite connection left a task that never finished (a hung loop)
            await asyncio.wait(self._background, timeout=2)
        for adapter in self.adapters.values():
            close = getattr(adapter, "close", None)
            if close is not None:
                await _quietly(close(), "adapter.close")
        await self.bus.aclose()
        await self.store.close()
        if self.dashboard is not None:
            await self.dashboard.stop()
        await self.control.stop()
        self.agent_factory.close()
        if self.sentinel is not None:
            await self.sentinel.stop()
        if self.watchdog is not None:
            self.watchdog.stop()
        self.notifier.close()
        if self.exit_code >= 0:
            log.info("gateway.stopped", exit_code=self.exit_code)

    async def _drain(self, timeout: float) -> bool:
        drain = asyncio.create_task(self.runner.drain(timeout))
        while not drain.done():
            await asyncio.wait({drain}, timeout=0.1)
            if self.force_exit:
                drain.cancel()
                return False
        return drain.result()

    async def _warm_up(self) -> None:
        """Build the model client ahead of the first message (it imports the SDK), then move
        everything loaded so far out of the garbage collector's way: the startup heap is
        ~100 MB of objects that live forever, and scanning it made every full collection a
        ~100 ms pause of the loop (measured: 107 ms before, under 1 ms after)."""
        try:
            await asyncio.to_thread(self.llm.warm)
        finally:
            gc.freeze()  # no collect first: that would itself be the pause we are avoiding

    def _prepare_dirs(self) -> None:
        for path in (self.config.home_path, self.config.workspace_path):
            path.mkdir(parents=True, exist_ok=True)

    def _spawn(self, coro: Any, name: str) -> None:
        self._background.append(asyncio.create_task(coro, name=name))


async def _quietly(coro: Any, what: str) -> None:
    try:
        await asyncio.wait_for(coro, 10)
    except Exception:
        log.exception(what)


__all__ = ["Gateway", "web"]
