"""What a chat, the model's `cronjob` tool and the operator may do with jobs: create, list,
update, pause, resume, run now, remove, show runs. A chat (and its model) sees and changes only
the jobs made in that chat; a job's own run creates none unless the config allows it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

import structlog

from hermes_gateway.config.schema import SchedulerConfig
from hermes_gateway.errors import JobRequestError
from hermes_gateway.events import MessageEvent
from hermes_gateway.platform_spec import capabilities, platform_spec
from hermes_gateway.scheduler.jobs import Job, Origin, Target, new_job, target
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import UNUSABLE, ScheduleError, host_zone, parse, zone_of

log = structlog.get_logger("hermes.scheduler")
ACTIONS = ("create", "list", "update", "pause", "resume", "run", "remove", "runs")
# The store's column widths (PostgreSQL refuses longer text) and the tool's repeat bound
TEXT_LIMITS = {"schedule": 200, "name": 200, "timezone": 64, "deliver": 300}
MAX_REPEAT = 100_000


JobServiceError = JobRequestError  # the job service's refusals


def when(t: float | None, zone: str) -> str:
    """A slot as a date in ``zone``; one that cannot be shown says so rather than failing."""
    if t is None:
        return "never"
    try:
        return datetime.fromtimestamp(t, zone_of(zone)).strftime(f"%Y-%m-%d %H:%M {zone}")
    except UNUSABLE:
        return f"(not a time: {t!r})"


def describe(job: Job) -> str:
    state = (
        job.state if job.state != "active" else f"next {when(job.next_run_at, job.schedule.zone)}"
    )
    if job.problem is not None:
        state = f"ERROR: {job.problem}"
    return f"{job.id} {job.name!r}: {job.schedule.text} ({state}; {job.runs} run(s))"


def checked_fields(request: dict[str, Any]) -> None:
    """Refuse what the store could not keep: text past its column, a repeat out of range."""
    for key, limit in TEXT_LIMITS.items():
        value = str(request.get(key) or "")
        if key == "schedule":
            value = " ".join(value.split())  # stored so, as parsed
        if len(value) > limit:
            raise JobServiceError(f"{key} is longer than {limit} characters")
    repeat = request.get("repeat")
    if repeat is not None and not (isinstance(repeat, int) and 1 <= repeat <= MAX_REPEAT):
        raise JobServiceError(f"repeat must be a whole number from 1 to {MAX_REPEAT}")


def check_deliverable(where: Target, enabled: frozenset[str], named: bool) -> None:
    """Refuse a destination no run could deliver to: a platform that is not installed, one
    off in the config (its run would fail at once, `job.no_adapter`), or, when ``named``
    by the operator, one that cannot send unasked. A chat's own platform that cannot push
    (the local API) stays allowed: its answers are kept in the job's runs, as documented."""
    platform = where.platform
    if not platform:
        return
    if platform_spec(platform) is None:
        raise JobServiceError(f"deliver: there is no platform {platform!r}")
    if not capabilities(platform).can_push:
        if named:
            raise JobServiceError(f"deliver: {platform} cannot send a message unasked")
        return
    if platform not in enabled:
        raise JobServiceError(
            f"deliver: {platform} is not enabled (platforms.{platform}.enabled is off in "
            "the config), so no answer could be delivered there; enable it and restart the "
            "gateway, or deliver elsewhere"
        )


class Kicks(Protocol):
    """What the job service asks of the `Scheduler`: look again now, or run a job at once."""

    def wake(self) -> None: ...

    async def run_now(self, job: Job) -> int | None: ...


class JobService:
    """``platforms``: the platforms enabled in the config, the only ones a job may deliver
    to (every way a job is made or changed comes through here)."""

    def __init__(
        self,
        ledger: Ledger,
        scheduler: Kicks,
        config: Callable[[], SchedulerConfig],
        default_zone: str,
        platforms: frozenset[str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.scheduler = scheduler
        self._config = config
        self.default_zone = default_zone
        self.platforms = platforms
        self.clock = clock

    @property
    def config(self) -> SchedulerConfig:
        return self._config()

    async def learn_zone(self) -> None:
        """At the start: with no `scheduler.timezone`, new jobs take the host's zone."""
        if not self.default_zone or self.default_zone == "UTC":
            self.default_zone = self.config.timezone or await asyncio.to_thread(host_zone)

    # -- who asks -------------------------------------------------------------------------

    async def from_tool(
        self, session_key: str, event: MessageEvent | None, request: dict[str, Any]
    ) -> str:
        """The `cronjob` tool of a chat's run (``event``: the message it answers) or of a
        job's own run (session ``cron:<id>``: it acts for the job's chat)."""
        if session_key.startswith("cron:"):
            parent = await self.ledger.get(session_key.removeprefix("cron:"))
            if parent is None:
                raise JobServiceError("this job no longer exists")
            if request.get("action") == "create" and not self.config.allow_jobs_from_jobs:
                raise JobServiceError(
                    "a scheduled job's run cannot create jobs (scheduler.allow_jobs_from_jobs)"
                )
            return await self.act(request, parent.origin, "job")
        if event is None:
            raise JobServiceError("jobs can be managed only from a chat")
        return await self.act(request, origin_of(event), "chat")

    async def command(self, event: MessageEvent, args: str) -> str:
        """`/cron [list] | pause|resume|run|rm|runs ID`, for the chat it is sent in."""
        words = args.split()
        verb = words[0].lower() if words else "list"
        verb = {"rm": "remove", "delete": "remove", "ls": "list"}.get(verb, verb)
        if (
            verb not in ACTIONS
            or verb in ("create", "update")
            or (verb != "list" and len(words) < 2)
        ):
            return "Usage: /cron [list] | /cron pause|resume|run|rm|runs ID"
        request: dict[str, Any] = {"action": verb}
        if verb != "list":
            request["job_id"] = words[1]
        try:
            return await self.act(request, origin_of(event), "chat")
        except JobServiceError as exc:
            return str(exc)

    # -- the actions ----------------------------------------------------------------------

    async def act(self, request: dict[str, Any], origin: Origin | None, by: str) -> str:
        """Do ``request`` for the chat ``origin`` (None: the operator, every job)."""
        action = request.get("action")
        if action == "create":
            job = await self.create(request, origin, by)
            first = when(job.next_run_at, job.schedule.zone)
            return f"Created job {job.id} ({job.name!r}, {job.schedule.text}); first run {first}."
        if action == "list":
            jobs = await self.visible(origin)
            return "\n".join(describe(j) for j in jobs) or "No scheduled jobs in this chat."
        job = await self.own(str(request.get("job_id") or ""), origin)
        if job.problem is not None and action in ("resume", "run"):
            raise JobServiceError(
                f"job {job.id} cannot {action}: {job.problem}; update its schedule or remove it"
            )
        now = self.clock()
        if action == "pause":
            await self.ledger.change(job.id, now, state="paused")
            return f"Paused {job.id}."
        if action == "resume":
            nxt = job.schedule.next_after(now)
            await self.ledger.change(
                job.id, now, state="active" if nxt else "done", next_run_at=nxt
            )
            self.scheduler.wake()
            return f"Resumed {job.id}; next run {when(nxt, job.schedule.zone)}."
        if action == "run":
            run_id = await self.scheduler.run_now(job)
            if run_id is None:
                return f"Job {job.id} is running already; not started again."
            return f"Job {job.id} is running now (run {run_id}); its answer comes here."
        if action == "remove":
            await self.ledger.remove(job.id)
            log.info("job.removed", job_id=job.id, by=by)
            return f"Removed {job.id}."
        if action == "runs":
            runs = await self.ledger.runs(job.id, limit=5)
            lines = [
                f"{when(r.scheduled_for, job.schedule.zone)}: {r.status}, delivery {r.delivery}"
                for r in runs
            ]
            return "\n".join(lines) or f"Job {job.id} has not run yet."
        if action == "update":
            return await self.update(job, request)
        raise JobServiceError(f"unknown action {action!r} (one of {', '.join(ACTIONS)})")

    async def create(self, request: dict[str, Any], origin: Origin | None, by: str) -> Job:
        prompt, text = str(request.get("prompt") or ""), str(request.get("schedule") or "")
        if not prompt.strip() or not text.strip():
            raise JobServiceError("create needs a prompt and a schedule")
        checked_fields(request)
        deliver = str(request.get("deliver") or "origin")
        if origin is None:  # the operator names where it goes
            where = target(deliver, Origin("", "dm", "", None, ""))
            origin = Origin(
                where.platform or "none", "dm", where.chat_id, where.thread_id, "operator"
            )
            deliver = deliver if where.platform else "none"
            check_deliverable(where, self.platforms, named=True)
        elif deliver not in ("origin", "none"):
            raise JobServiceError("from a chat, deliver is 'origin' or 'none'")
        else:
            check_deliverable(target(deliver, origin), self.platforms, named=False)
        if len(await self.visible(origin)) >= self.config.max_jobs_per_chat:
            raise JobServiceError(
                f"this chat has {self.config.max_jobs_per_chat} jobs, the most allowed"
            )
        now = self.clock()
        zone = str(request.get("timezone") or self.default_zone)
        try:
            schedule = parse(text, zone, now, min_interval_s=self.config.min_interval_s)
            job = new_job(
                name=str(request.get("name") or ""),
                prompt=prompt,
                schedule=schedule,
                origin=origin,
                now=now,
                deliver=deliver,
                created_by=by,
                repeat=request.get("repeat"),
                catch_up=self.config.catch_up,
            )
        except ScheduleError as exc:
            raise JobServiceError(str(exc)) from None
        await self.ledger.add(job, now)
        log.info("job.created", job_id=job.id, schedule=schedule.text, zone=zone, by=by)
        self.scheduler.wake()
        return job

    async def update(self, job: Job, request: dict[str, Any]) -> str:
        checked_fields(request)
        now = self.clock()
        values: dict[str, Any] = {}
        for key in ("prompt", "name", "repeat"):
            if request.get(key) is not None:
                values[key] = request[key]
        if request.get("deliver") in ("origin", "none"):
            check_deliverable(target(request["deliver"], job.origin), self.platforms, False)
            values["deliver"] = request["deliver"]
        if request.get("schedule") or request.get("timezone"):
            zone = str(request.get("timezone") or job.schedule.zone)
            try:
                s = parse(
                    str(request.get("schedule") or job.schedule.text),
                    zone,
                    now,
                    min_interval_s=self.config.min_interval_s,
                )
            except ScheduleError as exc:
                raise JobServiceError(str(exc)) from None
            values.update(
                schedule=s.text, kind=s.kind, timezone=s.zone, anchor=s.anchor, every_s=s.every_s
            )
            values["next_run_at"] = s.next_after(now)
            job = replace(job, schedule=s, next_run_at=values["next_run_at"])
        if not values:
            raise JobServiceError(
                "nothing to update: give prompt, name, schedule, timezone, deliver or repeat"
            )
        await self.ledger.change(job.id, now, **values)
        self.scheduler.wake()
        return f"Updated {job.id}; next run {when(job.next_run_at, job.schedule.zone)}."

    async def visible(self, origin: Origin | None) -> list[Job]:
        if origin is None:
            return await self.ledger.jobs()
        return await self.ledger.jobs(origin.platform, origin.chat_id)

    async def own(self, job_id: str, origin: Origin | None) -> Job:
        """The job, if ``origin``'s chat may touch it (the same answer as for no such job)."""
        job = await self.ledger.get(job_id) if job_id else None
        if job is None or (
            origin is not None
            and (job.origin.platform, job.origin.chat_id) != (origin.platform, origin.chat_id)
        ):
            raise JobServiceError(f"there is no job {job_id!r} in this chat (list shows them)")
        return job


def origin_of(event: MessageEvent) -> Origin:
    return Origin(event.platform, event.chat_type, event.chat_id, event.thread_id, event.user_id)
