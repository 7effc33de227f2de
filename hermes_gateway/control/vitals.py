"""What the gateway says about itself: /healthz, /readyz (with reasons), /status, and the
Prometheus gauges read at scrape time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermes_gateway import __version__

if TYPE_CHECKING:
    from agent_core import LLMClient
    from hermes_gateway.agents.cache import AgentCache
    from hermes_gateway.cluster.ownership import Ownership
    from hermes_gateway.cluster.roles import Roles
    from hermes_gateway.config import Config
    from hermes_gateway.config.live import LiveConfig
    from hermes_gateway.core.pool import AgentPool
    from hermes_gateway.core.quarantine import InboxRoutes
    from hermes_gateway.core.runner import GatewayRunner
    from hermes_gateway.liveness.watchdog import LoopWatchdog
    from hermes_gateway.mcp.manager import McpManager
    from hermes_gateway.memory.host import MemoryHost
    from hermes_gateway.metrics import Metrics
    from hermes_gateway.platforms.adapter import Adapter
    from hermes_gateway.scheduler.service import SchedulerService
    from hermes_gateway.store.store import Store


@dataclass(frozen=True, slots=True)
class VitalParts:
    """The parts the vitals read. ``closing``: intake has stopped (shutdown); ``watchdog``:
    the loop's, once the start has made it."""

    live: LiveConfig
    started_at: float
    metrics: Metrics
    llm: LLMClient
    store: Store
    adapters: dict[str, Adapter]
    runner: GatewayRunner
    pool: AgentPool
    agents: AgentCache
    inbox: InboxRoutes
    memory: MemoryHost
    scheduler: SchedulerService | None
    ownership: Ownership | None
    roles: Roles
    closing: Callable[[], bool]
    watchdog: Callable[[], LoopWatchdog | None]
    mcp: McpManager | None = None

    @property
    def config(self) -> Config:
        return self.live.now


class Vitals:
    """Reads the gateway's parts; changes nothing."""

    def __init__(self, parts: VitalParts) -> None:
        self.parts = parts

    def health(self) -> dict[str, Any]:
        g = self.parts
        wd = g.watchdog()
        return {
            "status": "ok",
            "uptime_s": round(time.time() - g.started_at, 1),
            "loop_lag_ms": round(wd.last_lag * 1000, 2) if wd else None,
        }

    def readiness(self) -> tuple[bool, list[str]]:
        g = self.parts
        reasons = []
        if g.closing():
            reasons.append("shutting down")
        if not g.llm.configured:
            reasons.append("model: not configured (set model.api_key or model.base_url)")
        if not g.store.is_open:
            reasons.append("store: not open")
        elif (problem := g.store.problem) is not None:
            reasons.append(f"store: {problem}")
        if g.scheduler is not None and (stalled := g.scheduler.problem()) is not None:
            reasons.append(stalled)
        if g.ownership is not None and not g.ownership.coordinator.available:
            reasons.append("cluster: coordination (Redis) unreachable; new messages wait")
        for name, adapter in g.adapters.items():
            h = adapter.health()
            if not h.ready:
                reasons.append(f"{name}: {h.detail or 'not connected'}")
        # a failing model leaves the gateway ready (it still answers, with the model's error
        # as the explanation: see docs/control-api.md), but the reasons say so
        notes = [note] if (note := self._model_note()) else []
        # a failing MCP server leaves it ready too: only that server's tools answer with errors
        notes += g.mcp.problems() if g.mcp is not None else []
        return not reasons, reasons + notes

    def _model_note(self) -> str | None:
        last = self.parts.llm.endpoint.last
        if last is None or last.ok:
            return None
        ago = round(time.time() - last.at)
        return (
            f"model: the last call failed {ago}s ago ({last.kind}: {last.error}); "
            "messages are answered with that error until a call succeeds"
        )

    def model(self) -> dict[str, Any]:
        """The model and what its endpoint did on the last real call."""
        g = self.parts
        last = g.llm.endpoint.last
        out: dict[str, Any] = {"name": g.config.model.name, "configured": g.llm.configured}
        if last is None:
            out["state"] = "unknown"  # no call yet
            return out
        out["state"] = "ok" if last.ok else "failing"
        out["last_call_s_ago"] = round(time.time() - last.at, 1)
        if not last.ok:
            out["error"] = {"kind": last.kind, "message": last.error}
        return out

    def status(self) -> dict[str, Any]:
        g = self.parts
        wd = g.watchdog()
        ready, reasons = self.readiness()
        return {
            "version": __version__,
            "ready": ready,
            "reasons": reasons,
            "uptime_s": round(time.time() - g.started_at, 1),
            "platforms": {
                name: {"ready": a.health().ready, "detail": a.health().detail}
                for name, a in g.adapters.items()
            },
            "sessions": g.runner.status(),
            "pool": g.pool.snapshot(),
            "loop_lag_ms": {
                "last": round(wd.last_lag * 1000, 2) if wd else None,
                "p99": round(wd.lag_percentile(0.99) * 1000, 2) if wd else None,
                "max": round(wd.max_lag * 1000, 2) if wd else None,
            },
            "model": self.model(),
            "busy_policy": g.config.runner.busy_policy,
            "busy_policies": {name: g.config.busy_policy_for(name) for name in g.adapters},
            "quarantined": g.inbox.summaries(),
            "scheduler": g.scheduler.status() if g.scheduler is not None else {"enabled": False},
            "memory": g.memory.status(),
            "cluster": self._cluster(),
            "mcp": g.mcp.status() if g.mcp is not None else {},
        }

    def _cluster(self) -> dict[str, Any] | None:
        """This instance's leases and roles, and the last survey of the whole cluster."""
        g = self.parts
        if g.ownership is None:
            return None
        return {**g.ownership.status(), **g.roles.status()}

    def register_gauges(self) -> None:
        g = self.parts
        m = g.metrics
        m.gauge("hermes_active_sessions", "Sessions with a run", lambda: self._stat("active"))
        m.gauge("hermes_pending_messages", "Messages waiting", lambda: self._stat("pending"))
        m.gauge("hermes_pool_busy", "Pool threads running", lambda: g.pool.busy)
        m.gauge("hermes_pool_waiting", "Runs waiting for a thread", lambda: g.pool.waiting)
        m.gauge("hermes_pool_abandoned", "Abandoned runs still running", lambda: g.pool.abandoned)
        m.gauge("hermes_cached_agents", "Agent cache size", lambda: len(g.agents))

    def _stat(self, key: str) -> float:
        return float(self.parts.runner.counts()[key])
