"""The scheduler inside a running gateway: the job service the `cronjob` tool and `/cron` share
(built first), the scheduler around it (handing its runs to the gateway's runner as turns of their
jobs' sessions), the operator's routes, and what it shows in /status, /readyz and /metrics."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import Counter

from hermes_gateway.core.job_turns import JobTurns
from hermes_gateway.scheduler.job_service import JobService, Kicks
from hermes_gateway.scheduler.jobs import Job
from hermes_gateway.scheduler.jobs_page import JobsPage
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.routes import JobRoutes
from hermes_gateway.scheduler.scheduler import Scheduler
from hermes_gateway.traces import OFF, Tracer

if TYPE_CHECKING:
    from hermes_gateway.config.live import LiveConfig
    from hermes_gateway.metrics import Metrics
    from hermes_gateway.store.store import Store


log = structlog.get_logger("hermes.scheduler")


def _runs_counter(m: Metrics) -> Counter:
    runs = Counter(
        "hermes_cron_runs", "Scheduled job runs by outcome", ["outcome"], registry=m.registry
    )
    for outcome in ("succeeded", "failed", "timed_out", "abandoned", "skipped", "missed"):
        runs.labels(outcome).inc(0)
    return runs


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()  # our own pid, reused after a crash: not the owner


def build_job_service(live: LiveConfig, store: Store, kicks: Kicks) -> JobService:
    """The job service the `cronjob` tool, `/cron` and the routes work through, built before
    the tool host and the commands; ``kicks`` reach the `Scheduler`, built after them (its runs are
    agents, whose tools use this job service)."""
    config = live.now
    owner = f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return JobService(
        Ledger(store, owner, config.scheduler.lease_s),
        kicks,
        lambda: live.now.scheduler,
        config.scheduler.timezone or "UTC",
        frozenset(config.platforms.enabled()),
    )


@dataclass(frozen=True, slots=True)
class LaterKicks:
    """The job service's `Kicks`, passed on to the scheduler ``scheduler()`` finds once it is built
    (the one cycle of the gateway's parts: the job service is in every agent's tools, the scheduler
    runs agents); nothing calls them before the gateway has started."""

    scheduler: Callable[[], Scheduler]

    def wake(self) -> None:
        self.scheduler().wake()

    async def run_now(self, job: Job) -> int | None:
        return await self.scheduler().run_now(job)


class SchedulerService:
    """Builds the scheduler around the job service, from the runner its runs are turns of (which
    delivers their answers too)."""

    def __init__(
        self,
        job_service: JobService,
        *,
        turns: JobTurns,
        metrics: Metrics,
        workers: int,
        per_user: Callable[[], bool],
        tracer: Tracer = OFF,
    ) -> None:
        self.host = socket.gethostname()[:64]
        self.job_service, self.ledger = job_service, job_service.ledger
        self._runs = _runs_counter(metrics)
        self.scheduler = Scheduler(
            lambda: job_service.config,
            self.ledger,
            turns,
            workers=workers,
            on_outcome=self._count,
            per_user=per_user,
            tracer=tracer,
        )
        self.jobs_page = JobsPage(job_service)  # the dashboard's Jobs page, when it is on
        self._register(metrics)

    def mount(self, add_route: Callable[..., None]) -> None:
        """The operator's routes, on the control server."""
        JobRoutes(self.job_service, self.ledger).mount(add_route)

    def _register(self, m: Metrics) -> None:
        s = self.scheduler
        m.gauge("hermes_cron_running", "Scheduled job runs in progress", lambda: s.running)
        m.gauge("hermes_cron_late_starts", "Job runs started over 60 s late", lambda: s.late_starts)
        m.gauge("hermes_cron_jobs", "Scheduled jobs (any state)", self._jobs)
        m.gauge("hermes_cron_next_due_seconds", "Seconds to the next slot", self._next_due)
        m.gauge("hermes_cron_tick_age_seconds", "Seconds since the last tick", self._tick_age)

    async def start(self, spawn: Callable[[Any, str], None]) -> None:
        await self.job_service.learn_zone()
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
        return {**self.scheduler.status(), "timezone": self.job_service.default_zone}

    def problem(self) -> str | None:
        return self.scheduler.stalled()
