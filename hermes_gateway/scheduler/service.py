"""The scheduler inside a running gateway: builds its parts from the gateway's (store, agent
cache, shared pool, delivery), mounts the operator's routes, gives the `cronjob` tool and
`/cron` their desk, and shows itself in /status, /readyz and /metrics."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import Counter

from hermes_gateway.config_schema import SchedulerConfig
from hermes_gateway.scheduler.board import JobBoard
from hermes_gateway.scheduler.desk import JobDesk
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.outbox import JobOutbox
from hermes_gateway.scheduler.routes import JobRoutes
from hermes_gateway.scheduler.runner import JobRunner
from hermes_gateway.scheduler.schedule import host_zone
from hermes_gateway.scheduler.scheduler import Scheduler

if TYPE_CHECKING:
    from hermes_gateway.server import Gateway


log = structlog.get_logger("hermes.scheduler")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()  # our own pid, reused after a crash: not the owner


class SchedulerService:
    def __init__(self, gateway: Gateway) -> None:
        config = gateway.config

        def section() -> SchedulerConfig:
            return gateway.config.scheduler

        self.host = socket.gethostname()[:64]
        owner = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.ledger = Ledger(gateway.store, owner, config.scheduler.lease_s)
        runner = JobRunner(gateway.store, gateway.agents, gateway.pool, config.runner.stop_grace_s)
        self.outbox = JobOutbox(
            gateway.delivery,
            gateway.adapters,
            self.ledger,
            join_chat=runner.join_chat,
            per_user=lambda: gateway.config.runner.group_sessions_per_user,
        )
        self.scheduler = Scheduler(
            section, self.ledger, runner, self.outbox, workers=config.runner.workers
        )
        self.desk = JobDesk(
            self.ledger,
            self.scheduler,
            section,
            config.scheduler.timezone or "UTC",
            frozenset(config.platforms.enabled()),
        )
        JobRoutes(self.desk, self.ledger).mount(gateway.control.add_route)
        self.board = JobBoard(self.desk)  # the dashboard's Jobs page, when it is on
        gateway.tool_host.jobs = self.desk
        gateway.commands.jobs = self.desk
        self._register(gateway)

    def _register(self, gateway: Gateway) -> None:
        s, m = self.scheduler, gateway.metrics
        runs = Counter(
            "hermes_cron_runs", "Scheduled job runs by outcome", ["outcome"], registry=m.registry
        )
        for outcome in ("succeeded", "failed", "timed_out", "abandoned", "skipped", "missed"):
            runs.labels(outcome).inc(0)
        self._runs = runs
        m.gauge("hermes_cron_running", "Scheduled job runs in progress", lambda: s.running)
        m.gauge("hermes_cron_late_starts", "Job runs started over 60 s late", lambda: s.late_starts)
        m.gauge("hermes_cron_jobs", "Scheduled jobs (any state)", self._jobs)
        m.gauge("hermes_cron_next_due_seconds", "Seconds to the next slot", self._next_due)
        m.gauge("hermes_cron_tick_age_seconds", "Seconds since the last tick", self._tick_age)

    async def start(self, spawn: Callable[[Any, str], None]) -> None:
        if not self.desk.default_zone or self.desk.default_zone == "UTC":
            self.desk.default_zone = self.desk.config.timezone or await asyncio.to_thread(host_zone)
        self.scheduler.on_outcome = self._count
        # what a crashed process of this host left behind is freed now, not a lease later
        freed = await self.ledger.take_back(self.host, pid_alive, time.time())
        if freed:
            log.info("scheduler.took_back", runs=freed)
        spawn(self.scheduler.run(), "scheduler")
        spawn(self.scheduler.heartbeat(), "scheduler-heartbeat")

    def _count(self, outcome: str) -> None:
        self._runs.labels(outcome).inc()

    async def stop(self) -> None:
        await self.scheduler.stop()

    def _jobs(self) -> float:
        return float(sum(self.scheduler.counts.get("jobs", {}).values()))

    def _next_due(self) -> float:
        at = self.scheduler.counts.get("next_due", {}).get("at")
        return float(at - time.time()) if at is not None else -1.0

    def _tick_age(self) -> float:
        last = self.scheduler.last_tick
        return -1.0 if last is None else time.monotonic() - last

    def status(self) -> dict[str, Any]:
        return {**self.scheduler.status(), "timezone": self.desk.default_zone}

    def problem(self) -> str | None:
        return self.scheduler.stalled()
