"""The daemon's lifecycle: startup -> main -> shutdown, signals and reload, of the parts the
composition root (`Gateway`) builds and hands it (`LifecycleParts`).

Shutdown order: stop intake -> drain with timeout -> interrupt agents -> stop the pool ->
close adapters -> flush the store: the adapters stop first, then each part `startup` started
is stopped in reverse (its stop is pushed on an `AsyncExitStack` as it starts). SIGTERM/SIGINT
set `should_exit`, at any moment of the start too (it is cancelled where it waits; what it
had started is stopped); a second one forces: no drain, and what the shutdown still does
after `FORCE_GRACE_S` is abandoned.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from hermes_gateway import __version__
from hermes_gateway.agents.factory import confine_tools
from hermes_gateway.config import Config, config_path
from hermes_gateway.core.hooks import collect_hooks, install_hooks
from hermes_gateway.core.housekeeping import Housekeeper
from hermes_gateway.core.replay import Replayer
from hermes_gateway.errors import ConfigError
from hermes_gateway.liveness.early_stop import EARLY
from hermes_gateway.liveness.sentinel import Sentinel
from hermes_gateway.liveness.watchdog import LoopWatchdog
from hermes_gateway.platforms.adapter import adapter_class, load_adapter
from hermes_gateway.traces import OFF, Tracer

if TYPE_CHECKING:
    from hermes_gateway.agents.cache import AgentCache
    from hermes_gateway.agents.factory import AgentFactory
    from hermes_gateway.agents.tool_host import GatewayToolHost
    from hermes_gateway.cluster.ownership import Ownership
    from hermes_gateway.config.live import LiveConfig
    from hermes_gateway.control.app import ControlServer
    from hermes_gateway.core.bus import EventBus, LifecycleEvent
    from hermes_gateway.core.delivery import Delivery
    from hermes_gateway.core.pool import AgentPool
    from hermes_gateway.core.quarantine import InboxRoutes
    from hermes_gateway.core.reception import Reception
    from hermes_gateway.core.runner import GatewayRunner
    from hermes_gateway.dashboard import Dashboard
    from hermes_gateway.liveness.sdnotify import SystemdNotifier
    from hermes_gateway.mcp.manager import McpManager
    from hermes_gateway.media_in.prepare import InboundMedia
    from hermes_gateway.memory.host import MemoryHost
    from hermes_gateway.metrics import Metrics
    from hermes_gateway.platforms.access import Gatekeeper
    from hermes_gateway.platforms.adapter import Adapter
    from hermes_gateway.platforms.pairing import PairingBook
    from hermes_gateway.scheduler.service import SchedulerService
    from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.gateway")
START_UNWIND_S = 5.0  # a start a stop cancelled: how long its unwinding may take at most
FORCE_POLL_S = 0.1  # how often a wait checks for a forced stop (a second signal)
FORCE_GRACE_S = 5.0  # a forced stop: what the shutdown still does (no drain) gets this long


@dataclass(frozen=True, slots=True)
class LifecycleParts:
    """What the lifecycle starts, runs and stops, built by the composition root
    (`hermes_gateway.server.Gateway`); each adapter is built with the `Reception`."""

    live: LiveConfig
    first_start: bool  # nothing of the gateway's was there before this start
    intake_closed: asyncio.Event  # set once the adapters stopped: nothing new is taken
    metrics: Metrics
    bus: EventBus
    store: Store
    pairing: PairingBook
    pool: AgentPool
    agent_factory: AgentFactory
    agents: AgentCache
    adapters: dict[str, Adapter]  # filled here at the start, one per enabled platform
    gate: Gatekeeper
    delivery: Delivery
    runner: GatewayRunner
    ownership: Ownership | None
    reception: Reception
    tool_host: GatewayToolHost
    memory: MemoryHost
    mcp: McpManager | None  # tools from MCP servers (None: none configured)
    inbox: InboxRoutes
    dashboard: Dashboard | None
    control: ControlServer
    scheduler: SchedulerService | None
    notifier: SystemdNotifier
    media: InboundMedia | None  # its transcription client, closed once the runs have ended
    tracer: Tracer = OFF  # its queued spans are exported last, within a timeout


class Lifecycle:
    """Startup -> main -> shutdown of the parts it is given, signals and reload; what it
    starts it owns (the loop's watchdog and sentinel, the background tasks, each part's
    stop)."""

    def __init__(self, parts: LifecycleParts, config_path: str | None = None) -> None:
        self.parts = parts
        self.config_path = config_path  # the file a SIGHUP reads again (None: defaults)
        self.should_exit = asyncio.Event()
        self.force_exit = False
        self.exit_code = 0
        self.watchdog: LoopWatchdog | None = None
        self.sentinel: Sentinel | None = None
        self._background: list[asyncio.Task[Any]] = []
        self._stops = AsyncExitStack()  # each started part's stop, pushed as it starts
        self._warmed = False  # the model client was built (at the first message)

    @property
    def config(self) -> Config:
        """The config in force (a SIGHUP reload swaps it)."""
        return self.parts.live.now

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        before = {
            sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_exit, sig)
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload(), "reload"))
        if (early := EARLY.taken()) is not None:  # it came while the gateway was being built
            self.handle_exit(early)
        try:
            try:
                if await self._start():
                    await self.should_exit.wait()
            except Exception as exc:  # the log must not end on a clean "stopped" line
                log.error("gateway.start_failed", error=str(exc), error_type=type(exc).__name__)
                self.exit_code = -1  # the CLI picks the real code from the exception
                raise
        finally:
            stopping = asyncio.create_task(self.shutdown(), name="shutdown")
            if not await self._unless_forced(stopping, grace=FORCE_GRACE_S):
                log.warning("gateway.stop_forced", exit_code=self.exit_code)
            for sig, handler in before.items():
                loop.remove_signal_handler(sig)
                # what was there before: the command's early handler, which keeps a late
                # signal from killing a process that stopped cleanly (-15 instead of 0)
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        return self.exit_code

    async def _start(self) -> bool:
        """`startup`, unless a stop comes first: then it is cancelled wherever it waits (the
        store opening or migrating, an adapter connecting, the cluster's first calls) and
        False, so that a stop at any moment of a start is prompt."""
        starting = asyncio.create_task(self.startup(), name="startup")
        stop = asyncio.create_task(self.should_exit.wait(), name="stop-requested")
        try:
            await asyncio.wait({starting, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if starting.done():
            starting.result()  # its failure is the start's
            return True
        log.info("gateway.start_abandoned")
        starting.cancel()
        starting.add_done_callback(_retrieve)  # what its unwinding raised is of no interest
        await self._unless_forced(starting, START_UNWIND_S)
        return False

    async def _unless_forced(
        self, task: asyncio.Task[Any], timeout: float | None = None, grace: float = 0.0
    ) -> bool:
        """Wait for ``task`` until it is done (True), ``timeout`` passes or a second signal
        forces the stop and ``grace`` more seconds pass (False: what it still does is
        abandoned)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not task.done() and not self.force_exit:
            left = FORCE_POLL_S if deadline is None else min(FORCE_POLL_S, deadline - loop.time())
            if left <= 0:
                break
            await asyncio.wait({task}, timeout=left)
        if not task.done() and self.force_exit and grace > 0:
            await asyncio.wait({task}, timeout=grace)
        return task.done()

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
        if await self.parts.live.reload(self.config_path):
            self.parts.gate.reconfigure()  # the one part that derives state
        if self.parts.mcp is not None:
            self.parts.mcp.refresh()  # the servers' tool lists, listed again

    async def _listen(self) -> None:
        """Open the control port; an address we cannot listen on is the operator's to fix, so
        it is a configuration error (exit 78: systemd must not restart into the same wall)."""
        try:
            await self.parts.control.start()
        except OSError as exc:
            where = f"{self.config.control.host}:{self.config.control.port}"
            raise ConfigError(
                "control.port", f"cannot listen on {where}: {exc.strerror or exc}"
            ) from None

    async def startup(self) -> None:
        """Start the parts, each one's stop pushed on `_stops` as its start begins (a start
        cut short, by a failure or a signal, is stopped too): the shutdown stops them in
        reverse."""
        stops = self._stops
        stops.callback(self.parts.notifier.close)
        # the platforms' SDKs import on threads while the store opens and replays (each
        # waits on the disk, not the interpreter): ~100 ms off the start for Telegram's
        classes = {
            name: asyncio.ensure_future(asyncio.to_thread(adapter_class, name))
            for name in self.config.platforms.enabled()
        }
        stops.callback(_abandon, classes.values())  # a start cut short: its imports' ends unread
        confined = await self._prepare(stops)
        replayer = Replayer(
            self.parts.store,
            self.parts.runner,
            self.parts.delivery,
            self.parts.adapters,
            self.parts.live,
            self.parts.tracer,
        )
        if self.parts.ownership is None:  # in a cluster each session is replayed under its lease
            await replayer.load()  # before intake: what this run takes is not a leftover
        await self.parts.inbox.load()  # what that quarantined, and what earlier starts did
        for name, importing in classes.items():
            cls = await importing
            adapter = self.parts.adapters[name] = load_adapter(name, self.parts.reception, cls)
            if (close := getattr(adapter, "close", None)) is not None:
                stops.push_async_callback(_quietly, close, "adapter.close")
        if self.parts.dashboard is not None:
            stops.push_async_callback(self.parts.dashboard.stop)
            await self.parts.dashboard.start()
        await confined  # tools are walled in before a chat can reach them
        stops.push_async_callback(self.parts.control.stop)
        await self._listen()
        stops.push_async_callback(self._end_background)
        stops.push_async_callback(asyncio.to_thread, self.parts.tracer.shutdown)
        if self.parts.media is not None:
            stops.push_async_callback(self.parts.media.close)
        stops.push_async_callback(asyncio.to_thread, self.parts.pool.shutdown)
        # undelivered replies wait in the inbox for the next start
        stops.push_async_callback(self.parts.delivery.close)
        for name, adapter in self.parts.adapters.items():  # stopped first, by `shutdown` itself
            await adapter.start()
            log.info("adapter.started", platform=name)
        await self._start_runs(replayer, stops)
        self._spawn(
            Housekeeper(self.parts.live, self.parts.agents, self.parts.store).run(), "housekeeping"
        )
        if self.parts.scheduler is not None:  # adapters up: its answers can go out
            # no new job runs; running ones are recorded stopped
            stops.push_async_callback(_quietly, self.parts.scheduler.stop, "scheduler.stop")
            await self.parts.scheduler.start(self._spawn)
        # what the start loaded lives for good: out of the collector's way (see `_warm_up`)
        gc.freeze()  # no collect first: that would itself be the pause we are avoiding
        gc.enable()  # off while the command imported and started (`hermes_gateway.__main__`)
        self.parts.bus.subscribe(self._first_message, ["message_received"], name="warm-up")
        self.parts.notifier.notify("READY=1")
        self.parts.bus.emit("gateway_startup", session_key="", version=__version__)
        self._announce_ready()

    async def _start_runs(self, replayer: Replayer, stops: AsyncExitStack) -> None:
        """What earlier runs left is taken up (in a cluster, under each session's lease);
        stopping lets the runs in progress finish, then interrupts the rest, before the
        leases go."""
        if self.parts.ownership is None:
            self._spawn(replayer.run(), "replay")
        else:  # its first sweep takes over the leftovers of sessions no instance owns
            # the leases go at once: another instance takes over
            stops.push_async_callback(self.parts.ownership.close)
            await self.parts.ownership.start()
        stops.push_async_callback(self._stop_runs)

    async def _prepare(self, stops: AsyncExitStack) -> asyncio.Task[None]:
        """The guards first, then what intake needs: dirs, tools, the store, memory, hooks;
        returns the tools' confinement, still under way."""
        loop = asyncio.get_running_loop()
        self.parts.tool_host.bind(loop)
        self.parts.memory.bind(loop)
        self.watchdog = LoopWatchdog(
            loop, self.config.watchdog, self.parts.metrics, self.parts.notifier
        )
        stops.callback(self.watchdog.stop)
        self.watchdog.start()
        self.sentinel = Sentinel.for_config(loop, self.config)  # sees what a thread cannot
        stops.push_async_callback(self.sentinel.stop)
        self.sentinel.start()
        stops.callback(self.parts.agent_factory.close)  # after the pool: no run is left to use it
        stops.push_async_callback(self.parts.tool_host.close)  # the browser, when one was started
        await asyncio.to_thread(self._prepare_dirs)
        # tool modules are imported off the loop, before the first agent needs them
        await asyncio.to_thread(
            lambda: [self.parts.agent_factory.toolset(p) for p in self.config.platforms.enabled()]
        )
        stops.push_async_callback(self.parts.store.close)
        await self.parts.store.open()
        # after the open (it tightens the database's files); its probe of the sandbox, a child
        # process, runs while the start goes on: `startup` waits for it before listening
        confining = asyncio.to_thread(confine_tools, self.config, self.config_path)
        confined = asyncio.create_task(confining, name="confine-tools")
        confined.add_done_callback(_retrieve)  # a start failing meanwhile leaves no unread error
        if self.parts.memory.service is not None:
            # auto-retains in flight finish before the store closes
            stops.push_async_callback(self.parts.memory.service.close)
            await self.parts.memory.service.archive.open()  # pgvector or not, found once, here
        hooks = await asyncio.to_thread(
            collect_hooks, self.config.hooks, self.config.home_path / "hooks"
        )
        install_hooks(self.parts.bus, hooks)
        stops.push_async_callback(self.parts.bus.aclose)
        await self.parts.memory.find_legacy(self.config.home_path)
        if self.parts.mcp is not None:
            await confined  # a stdio server runs inside the tools' walls: they come first
            stops.push_async_callback(self.parts.mcp.stop)
            await self.parts.mcp.start()
        await self.parts.pairing.load()
        return confined

    def _announce_ready(self) -> None:
        log.info(
            "gateway.ready",
            version=__version__,
            port=self.parts.control.port,
            platforms=list(self.parts.adapters),
            model=self.config.model.name,
            workers=self.parts.pool.workers,
            home=str(self.config.home_path),
            config=str(config_path(self.config_path) or "built-in defaults"),
        )
        ready = self.parts.agent_factory.llm.configured
        if not ready:
            env_file = self.config.home_path / "gateway.env"
            log.warning(
                "model.not_configured",
                hint="every chat is answered with how to set one: put model.api_key (or "
                f"OPENAI_API_KEY in {env_file}) or a local model.base_url in the config",
            )
        started = Started(
            config_path(self.config_path),
            self.parts.control.port,
            self.parts.first_start,
            ready,
        )
        if text := next_steps(self.config, started):
            self._spawn(asyncio.to_thread(_tell, text), "next-steps")

    async def shutdown(self) -> None:
        """Stop intake, then what `startup` started, in reverse: the runs drain (or are
        interrupted), the leases go, delivery and the pool stop, ... the store closes last."""
        self.parts.notifier.notify("STOPPING=1")
        self.parts.bus.emit("gateway_shutdown", session_key="")
        # stop intake first: anything an adapter fetched meanwhile still lands in the inbox
        for adapter in self.parts.adapters.values():
            await _quietly(adapter.stop, "adapter.stop")
        self.parts.intake_closed.set()
        await self._stops.aclose()
        if self.exit_code >= 0:
            log.info("gateway.stopped", exit_code=self.exit_code)

    async def _stop_runs(self) -> None:
        drain = 0.0 if self.force_exit else self.config.runner.drain_timeout_s
        drained = await self._drain(drain)
        if not drained:
            log.warning("gateway.drain_timeout", seconds=drain)
        await self.parts.runner.interrupt_all()

    async def _end_background(self) -> None:
        for task in self._background:
            task.cancel()
        if self._background:
            # let a cancelled store.prune unwind before the engine is disposed: disposing it
            # under a live aiosqlite connection left a task that never finished (a hung loop)
            await asyncio.wait(self._background, timeout=2)

    async def _drain(self, timeout: float) -> bool:
        drain = asyncio.create_task(self.parts.runner.drain(timeout))
        while not drain.done():
            await asyncio.wait({drain}, timeout=0.1)
            if self.force_exit:
                drain.cancel()
                return False
        return drain.result()

    async def _first_message(self, event: LifecycleEvent) -> None:
        """The model client is built when the first message comes, beside its intake: it
        imports the SDK (about 25 MB and 880 modules), which an idle gateway does not need."""
        if not self._warmed:
            self._warmed = True
            self._spawn(self._warm_up(), "warm-up")

    async def _warm_up(self) -> None:
        """Build the model client, then move what it loaded out of the garbage collector's
        way, as the start's heap was at ready: objects that live for ever, ~100 MB of them,
        made every full collection a ~100 ms pause of the loop (107 ms before, under 1 ms
        after)."""
        try:
            await asyncio.to_thread(self.parts.agent_factory.llm.warm)
        finally:
            gc.freeze()

    def _prepare_dirs(self) -> None:
        for path in (self.config.home_path, self.config.workspace_path):
            path.mkdir(parents=True, exist_ok=True)

    def _spawn(self, coro: Any, name: str) -> None:
        self._background.append(asyncio.create_task(coro, name=name))


def first_start(config: Config) -> bool:
    """Nothing of the gateway's is here yet: no home, or (SQLite) no database in it. Asked
    before the start creates them."""
    if config.store.url is None:
        return not (config.home_path / "state.db").exists()
    return not config.home_path.exists()


@dataclass(frozen=True, slots=True)
class Started:
    """What the lines name: the config file read (None: built-in defaults), the port the
    control server listens on, and how the start went."""

    config_file: Path | None
    port: int
    first: bool
    model_ready: bool


def next_steps(config: Config, started: Started) -> str:
    """The lines, or '' when there is nothing to tell (a later start, with a model)."""
    if started.model_ready and not started.first:
        return ""
    home = config.home_path
    default_file = home / "config.yaml"
    lines = ["", "Hermes is running." + (" First start: next steps" if started.first else "")]
    chat = "hermes chat"
    if started.config_file is not None and started.config_file != default_file:
        chat += f" --config {started.config_file}"
    lines.append(f"  chat with it:  {chat}")
    if config.dashboard.enabled:
        host = config.control.host
        host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        lines.append(f"  dashboard:     http://{host}:{started.port}/dashboard/")
    if started.config_file is None:
        lines.append(
            f"  config:        none yet (built-in defaults); create {default_file} "
            "(config.example.yaml shows every key), then restart"
        )
    else:
        lines.append(f"  config:        {started.config_file}")
    if not started.model_ready:
        lines.append(
            f"  model:         none configured: put OPENAI_API_KEY=... in {home / 'gateway.env'} "
            "(or model.api_key in the config), or point model.base_url at a local server, "
            "then restart"
        )
    lines.append(f"  home:          {home}")
    return "\n".join(lines) + "\n\n"


def _tell(text: str) -> None:
    """The next steps, for the person at the terminal (off the loop: stderr may be a pipe)."""
    sys.stderr.write(text)
    sys.stderr.flush()


def _abandon(tasks: Iterable[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
        task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _quietly(call: Callable[[], Awaitable[Any]], what: str) -> None:
    try:
        await asyncio.wait_for(call(), 10)
    except Exception:
        log.exception(what)
