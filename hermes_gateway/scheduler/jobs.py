"""A job and a run as the scheduler sees them, where a job's answer goes, and the catch-up
plan: what to do with the slots that came due while nothing claimed them."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Literal

from hermes_gateway.events import OutboundFile
from hermes_gateway.scheduler.schedule import (
    UNUSABLE,
    Kind,
    Schedule,
    ScheduleError,
    load,
    slot_in_range,
)
from hermes_gateway.store.models import CronJobRow
from hermes_gateway.store.store import files_from_json

CatchUp = Literal["one", "skip"]
Action = Literal["run", "skip", "missed"]
LIVE = ("claimed", "running")
FINAL = ("succeeded", "failed", "timed_out", "abandoned", "skipped", "missed")


@dataclass(frozen=True, slots=True)
class Origin:
    """The chat a job was made in: whose it is, and where `origin` delivers."""

    platform: str
    chat_type: str
    chat_id: str
    thread_id: str | None
    user_id: str


@dataclass(frozen=True, slots=True)
class Target:
    """Where a run's answer goes; None platform: nowhere (`none`)."""

    platform: str | None
    chat_id: str = ""
    thread_id: str | None = None


def target(deliver: str, origin: Origin) -> Target:
    """``origin``, ``none`` or ``platform:chat_id[:thread_id]``."""
    if deliver == "origin":
        return Target(origin.platform, origin.chat_id, origin.thread_id)
    if deliver == "none":
        return Target(None)
    platform, _, rest = deliver.partition(":")
    chat_id, _, thread = rest.partition(":")
    if not platform or not chat_id:
        raise ScheduleError(
            f"deliver {deliver!r}: use 'origin', 'none' or 'platform:chat_id[:thread_id]'"
        )
    return Target(platform, chat_id, thread or None)


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored. ``problem``: why its stored schedule cannot be used (a row an older
    version or a hand wrote); such a job is listed with it, never planned or run, and its
    ``schedule`` holds the row's fields unchecked."""

    id: str
    name: str
    prompt: str
    schedule: Schedule
    deliver: str
    origin: Origin
    created_by: str
    state: str
    next_run_at: int | None
    repeat: int | None
    runs: int
    catch_up: CatchUp
    grace_s: float | None
    timeout_s: float | None
    created_at: float
    problem: str | None = None

    @property
    def session_key(self) -> str:
        """The job's own session: its runs' history, apart from the chat's."""
        return f"cron:{self.id}"

    def summary(self) -> dict[str, object]:
        s = self.schedule
        return {
            "id": self.id,
            "name": self.name,
            "prompt": self.prompt,
            "schedule": s.text,
            "kind": s.kind,
            "timezone": s.zone,
            "anchor": s.anchor,
            "every_s": s.every_s,
            "deliver": self.deliver,
            "origin": f"{self.origin.platform}:{self.origin.chat_id}",
            "state": self.state,
            "next_run_at": self.next_run_at,
            "repeat": self.repeat,
            "runs": self.runs,
            "catch_up": self.catch_up,
            "error": self.problem,
        }


def new_job(
    *,
    name: str,
    prompt: str,
    schedule: Schedule,
    origin: Origin,
    now: float,
    deliver: str = "origin",
    created_by: str = "chat",
    repeat: int | None = None,
    catch_up: CatchUp = "one",
    grace_s: float | None = None,
    timeout_s: float | None = None,
) -> Job:
    """A new active job; its first slot is the schedule's first after ``now``."""
    target(deliver, origin)  # refuse a target that cannot be read now, not at the first run
    return Job(
        id=secrets.token_hex(4),
        name=name or prompt[:40],
        prompt=prompt,
        schedule=schedule,
        deliver=deliver,
        origin=origin,
        created_by=created_by,
        state="active",
        next_run_at=schedule.next_after(now),
        repeat=repeat,
        runs=0,
        catch_up=catch_up,
        grace_s=grace_s,
        timeout_s=timeout_s,
        created_at=now,
    )


def job_from_row(r: CronJobRow) -> Job:
    """The job a row holds; a row whose schedule cannot be used is a job with a `problem`, so
    that one bad row never fails a whole list."""
    schedule, problem = _schedule_of(r)
    origin = Origin(
        r.origin_platform,
        r.origin_chat_type,
        r.origin_chat_id,
        r.origin_thread_id,
        r.origin_user_id,
    )
    return Job(
        id=r.id,
        name=r.name,
        prompt=r.prompt,
        schedule=schedule,
        deliver=r.deliver,
        origin=origin,
        created_by=r.created_by,
        state=r.state,
        next_run_at=r.next_run_at if problem is None else None,
        repeat=r.repeat,
        runs=r.runs,
        catch_up="skip" if r.catch_up == "skip" else "one",
        grace_s=r.grace_s,
        timeout_s=r.timeout_s,
        created_at=r.created_at,
        problem=problem,
    )


def _schedule_of(r: CronJobRow) -> tuple[Schedule, str | None]:
    try:
        slot_in_range(r.next_run_at)
        return load(r.kind, r.schedule, r.timezone, r.anchor, r.every_s), None
    except ScheduleError as exc:
        problem = f"its stored schedule cannot be used: {exc}"
    except UNUSABLE as exc:
        problem = f"its stored schedule cannot be used: {type(exc).__name__}: {exc}"
    kind: Kind = r.kind if r.kind in ("once", "interval", "cron") else "once"  # type: ignore[assignment]
    anchor, every_s = (n if isinstance(n, int) else 0 for n in (r.anchor, r.every_s))
    return Schedule(kind, str(r.schedule), str(r.timezone), anchor, every_s), problem


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: int
    job_id: str
    scheduled_for: int
    kind: str
    status: str
    delivery: str
    claimed_at: float
    started_at: float | None
    finished_at: float | None
    missed: int
    parts_sent: int
    output: str | None
    error: str | None
    sending: int | None = None  # the part whose send began last (its intent was written)
    sending_after: str | None = None  # the platform reference that part comes after
    output_files: str | None = None  # the files the answer sends after its text (JSON)

    @property
    def files(self) -> tuple[OutboundFile, ...]:
        """The files the answer sends after its text (`send_file`'s), in order."""
        return files_from_json(self.output_files)

    @property
    def doubt(self) -> str | None:
        """A part whose send began and was never recorded done (a crash cut it short): it
        may be out already; the reference it comes after, else None."""
        if self.sending is None or self.sending != self.parts_sent:
            return None
        return self.sending_after or ""

    def summary(self, full: bool = False) -> dict[str, object]:
        """The run for a listing: its output cut to 500 characters unless ``full``."""
        out = self.output or ""
        return {
            "id": self.id,
            "job_id": self.job_id,
            "scheduled_for": self.scheduled_for,
            "kind": self.kind,
            "status": self.status,
            "delivery": self.delivery,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "missed": self.missed,
            "output": out if full else out[:500],
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """What one tick does with a due job: run ``slot`` (``kind`` scheduled, late or
    catch_up), record it skipped, or record a one-shot missed; ``missed`` earlier slots are
    covered by it; ``next_run_at`` is the job's slot after it (None: the job is done)."""

    action: Action
    slot: int
    kind: str
    missed: int
    next_run_at: int | None


def grace_for(job: Job, now: float, grace_max_s: float) -> float:
    """The job's own grace, else half its period, at most ``grace_max_s`` (a one-shot: that)."""
    if job.grace_s is not None:
        return job.grace_s
    period = job.schedule.period_s(now)
    return grace_max_s if period is None else min(period / 2, grace_max_s)


def plan(job: Job, now: float, grace_max_s: float, late_after_s: float = 60) -> Plan | None:
    """The catch-up policy for a job whose `next_run_at` has come; None if it has not."""
    first = job.next_run_at
    if first is None or first > now:
        return None
    s = job.schedule
    latest = s.latest_at_or_before(now)
    if latest is None or latest < first:
        latest = first
    covered = s.count(first - 1, latest) - 1 if latest > first else 0
    after = s.next_after(latest)
    last = job.repeat is not None and job.runs + 1 >= job.repeat  # a repeat count reached
    nxt = None if last else after
    late = now - latest
    if late <= grace_for(job, now, grace_max_s):
        kind = "late" if late > late_after_s or covered else "scheduled"
        return Plan("run", latest, kind, covered, nxt)
    if s.kind == "once":
        return Plan("missed", latest, "missed", 0, None)
    if job.catch_up == "one":
        return Plan("run", latest, "catch_up", covered, nxt)
    return Plan("skip", latest, "skipped", covered + 1, after)
