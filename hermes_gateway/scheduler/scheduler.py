"""The ticker: every `scheduler.tick_s` (or at once when woken) it reaps runs whose lease
expired, takes over answers left undelivered, and claims the slots that came due, by the
catch-up plan; claimed runs wait in a queue (as rows claimed in the store, not as tasks) for
one of `scheduler.max_parallel` workers, which hand each to the runner as a turn of the job's
session (`JobTurns`), always leaving a pool thread for chats, and record how it ended. The
clock is injected (tests move it)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import Any

import structlog

from hermes_gateway.config.schema import SchedulerConfig
from hermes_gateway.core.job_turns import SILENT, JobTurns, TurnOutcome
from hermes_gateway.errors import StoreError
from hermes_gateway.events import OutboundFile, OutboundKind
from hermes_gateway.scheduler.job_turn import answer_of, turn_of
from hermes_gateway.scheduler.jobs import Job, Plan, RunRecord, plan
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import UNUSABLE
from hermes_gateway.traces import OFF, Tracer

log = structlog.get_logger("hermes.scheduler")
MISSED = (
    "Scheduled job {name!r} ({id}) was due at {when}, while I was not running, and is more "
    "than its grace late: it did not run. Create it again if it still matters."
)
FAILED = "Scheduled job {name!r} ({id}) did not complete: {error}"
LATE_AFTER_S = 60.0
DUE_BATCH = 100
CLAIM_CHUNK = 25
PLAN_SLICE_S = 0.002  # planning a burst gives the loop back at least this often
TRACES_KEPT = 4096  # jobs whose last run's trace the next run links to


class Scheduler:
    def __init__(
        self,
        config: Callable[[], SchedulerConfig],
        ledger: Ledger,
        turns: JobTurns,
        *,
        workers: int,
        clock: Callable[[], float] = time.time,
        on_outcome: Callable[[str], None] = lambda outcome: None,
        per_user: Callable[[], bool] = lambda: True,
        tracer: Tracer = OFF,
    ) -> None:
        """``turns``: the runner, which runs claimed runs and delivers their answers;
        ``per_user``: whether a group chat has a session per user
        (`runner.group_sessions_per_user`), to name the chat an answer joins."""
        self._config = config
        self.ledger = ledger
        self.turns = turns
        self.per_user = per_user
        self.tracer = tracer
        self._traces: OrderedDict[str, str] = OrderedDict()  # job id -> its last run's span
        self.deliveries: Counter[str] = Counter()  # how deliveries ended (not those taken)
        self.clock = clock
        # a chat message never waits behind jobs: jobs leave one pool thread free
        self.parallel = max(1, min(config().max_parallel, workers - 1))
        self._queue: deque[tuple[Job, int, int]] = deque()  # claimed runs: job, run id, slot
        self._workers = 0
        self._wake = asyncio.Event()
        self._live: dict[int, str] = {}  # run id -> job id: leases to renew (queued ones too)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.last_tick: float | None = None  # monotonic
        self.outcomes: Counter[str] = Counter()
        self.on_outcome = on_outcome  # the metrics' counter
        self.late_starts = 0
        self.running = 0
        self.counts: dict[str, Any] = {}
        self._counted_at = 0.0

    @property
    def config(self) -> SchedulerConfig:
        return self._config()

    # -- the loops ----------------------------------------------------------------------

    async def run(self) -> None:
        """Tick until cancelled; a failing tick (the store is down) is logged and retried."""
        self.last_tick = time.monotonic()
        while True:
            try:
                await self.tick()
            except StoreError as exc:
                log.error("scheduler.tick_failed", error=str(exc))
            except Exception:
                log.exception("scheduler.tick_crashed")
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self.config.tick_s)
            except TimeoutError:
                pass

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.config.lease_s / 3)
            try:
                await self.ledger.heartbeat(list(self._live), self.clock())
            except StoreError as exc:
                log.error("scheduler.heartbeat_failed", error=str(exc))

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] += 1
        self.on_outcome(outcome)

    def wake(self) -> None:
        self._wake.set()

    async def tick(self) -> None:
        now, grace = self.clock(), self.config.grace_max_s
        for gone in await self.ledger.reap(now):
            self._count("abandoned")
            log.warning(
                "job.abandoned", job_id=gone.job_id, run_id=gone.id, slot=gone.scheduled_for
            )
        for left in await self.ledger.adopt_undelivered(now):
            self._adopt(left)
        while True:  # a burst of due jobs is claimed in one tick, a batch at a time
            due = await self.ledger.due(now, DUE_BATCH)
            claimed = 0
            for start in range(0, len(due), CLAIM_CHUNK):  # chats' writes and turns fit between
                chunk = await self._plan(due[start : start + CLAIM_CHUNK], now, grace)
                run_ids = await self.ledger.claim_batch(chunk, now) if chunk else []
                got = [(j, p, i) for (j, p), i in zip(chunk, run_ids, strict=True) if i is not None]
                claimed += len(got)
                self._claimed(got)
            if len(due) < DUE_BATCH or not claimed:  # the rest wait for their runs to end
                break
        self.last_tick = time.monotonic()
        if time.monotonic() - self._counted_at > 10:
            self._counted_at = time.monotonic()
            self.counts = await self.ledger.counts()

    async def _plan(self, jobs: list[Job], now: float, grace: float) -> list[tuple[Job, Plan]]:
        """The catch-up plans of due jobs; a long list gives the event loop back in between. A
        job whose slots cannot be computed is set aside, and the others go on."""
        out, since = [], time.perf_counter()
        for job in jobs:
            try:
                p = plan(job, now, grace, LATE_AFTER_S)
            except UNUSABLE as exc:
                self.ledger.put_aside(job.id, f"its slots cannot be computed: {exc!r}")
                p = None
            if p is not None:
                out.append((job, p))
            if time.perf_counter() - since > PLAN_SLICE_S:
                await asyncio.sleep(0)
                since = time.perf_counter()
        return out

    def _claimed(self, got: list[tuple[Job, Plan, int]]) -> None:
        """Queue a batch's runs, record its skips and missed one-shots: one log line for the
        runs and one for the skips of a batch, not one per job."""
        runs = [(j, p, i) for j, p, i in got if p.action == "run"]
        skips = [(j, p, i) for j, p, i in got if p.action == "skip"]
        for job, p, run_id in runs:
            self._live[run_id] = job.id
            self._queue.append((job, run_id, p.slot))
        if runs:
            kinds = Counter(p.kind for _, p, _ in runs)
            log.info("job.claimed", count=len(runs), kinds=dict(kinds), **_ids(runs))
            self._pump()
        if skips:
            for _ in skips:
                self._count("skipped")
            missed = [p.missed for _, p, _ in skips]
            log.info("job.skipped", count=len(skips), missed=missed, **_ids(skips))
        for job, p, run_id in got:
            if p.action == "missed":
                self._count("missed")
                log.warning("job.missed", job_id=job.id, run_id=run_id, slot=p.slot)
                when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(p.slot))
                text = MISSED.format(name=job.name, id=job.id, when=when)
                self._spawn(self._deliver(job, run_id, text, "notice"), run_id, job.id)

    async def run_now(self, job: Job) -> int | None:
        """ "Run now", whatever the schedule says; None while its previous run is live."""
        now = self.clock()
        run_id = await self.ledger.claim_now(job, now)
        if run_id is not None:
            log.info(
                "job.claimed", count=1, kinds={"manual": 1}, job_ids=[job.id], run_ids=[run_id]
            )
            self._live[run_id] = job.id
            self._queue.appendleft((job, run_id, int(now)))  # asked for now: ahead of a burst
            self._pump()
        return run_id

    def _adopt(self, left: RunRecord) -> None:
        async def send() -> None:
            job = await self.ledger.get(left.job_id)
            if job is not None and left.output is not None:
                doubt = left.doubt  # a part whose send the crash cut short: checked first
                log.info(
                    "job.redelivering", job_id=job.id, run_id=left.id, in_doubt=doubt is not None
                )
                sent, files = left.parts_sent, left.files
                await self._deliver(job, left.id, left.output, "reply", sent, doubt, files)

        self._spawn(send(), left.id, left.job_id)

    # -- one run ------------------------------------------------------------------------

    def _pump(self) -> None:
        """Workers for the queued runs, up to the cap."""
        while self._queue and self._workers < self.parallel:
            self._workers += 1
            self._track(asyncio.create_task(self._work(), name="job-worker"))

    async def _work(self) -> None:
        try:
            while self._queue:
                job, run_id, slot = self._queue.popleft()
                delivering = False
                try:
                    delivering = await self._traced(job, run_id, slot)
                except Exception as exc:  # the store failed: the lease lapses, the run is reaped
                    log.error("job.task_failed", run_id=run_id, error=repr(exc))
                finally:
                    if not delivering:
                        self._live.pop(run_id, None)
        finally:
            self._workers -= 1

    async def _traced(self, job: Job, run_id: int, slot: int) -> bool:
        """`_execute` as a trace of its own: a `job.run` root (its run, the delivery of its
        answer under it), linked to the job's previous run's while this process runs. The job
        is named by a hash of its id: its name and prompt are the user's words."""
        previous = self._traces.pop(job.id, "")
        job_hash = hashlib.sha256(job.id.encode()).hexdigest()[:16]
        attrs = {"hermes.job.hash": job_hash, "hermes.job.schedule": job.schedule.kind}
        with self.tracer.root("job.run", attrs, (previous,) if previous else ()):
            if here := self.tracer.traceparent():
                self._traces[job.id] = here
                while len(self._traces) > TRACES_KEPT:
                    self._traces.popitem(last=False)
            return await self._execute(job, run_id, slot)

    async def _execute(self, job: Job, run_id: int, slot: int) -> bool:
        """Start, run and record one run; whether its answer is being delivered."""
        now = self.clock()
        if not await self.ledger.start(run_id, now):
            return False  # reaped while it waited (the store stalled past its lease)
        if now - slot > LATE_AFTER_S:
            self.late_starts += 1
        self.running += 1
        try:
            timeout = job.timeout_s or self.config.run_timeout_s
            outcome = await self.turns.run_job(turn_of(job, run_id, slot, timeout))
        except Exception as exc:
            log.exception("job.crashed", job_id=job.id, run_id=run_id)
            outcome = TurnOutcome("failed", "", f"crashed: {type(exc).__name__}")
        finally:
            self.running -= 1
        self.tracer.annotate("hermes.job.status", outcome.status)  # on its `job.run` span
        silent = outcome.status == "succeeded" and outcome.text == SILENT
        text = outcome.text or "(no answer)"
        if outcome.status != "succeeded":
            text = FAILED.format(name=job.name, id=job.id, error=outcome.error)
        delivery = "skipped" if silent or job.deliver == "none" else "pending"
        self._count(outcome.status)
        files = outcome.files  # only a succeeded answer has them; [SILENT] sends none either
        ended = (outcome.status, self.clock(), outcome.text, outcome.error, delivery, files)
        if not await self.ledger.finish(run_id, *ended):
            log.warning("job.finish_lost", job_id=job.id, run_id=run_id)  # reaped meanwhile
            return False
        if delivery != "pending":
            return False
        # a delivery and its retries take minutes at worst: not on a worker
        kind: OutboundKind = "reply" if outcome.status == "succeeded" else "notice"
        self._spawn(self._deliver(job, run_id, text, kind, files=files), run_id, job.id)
        return True

    async def _deliver(
        self,
        job: Job,
        run_id: int,
        text: str,
        kind: OutboundKind,
        parts_sent: int = 0,
        doubt: str | None = None,
        files: tuple[OutboundFile, ...] = (),
    ) -> str:
        """The answer to the job's target, its ``files`` after its text, through the runner's
        delivery (which records it on the run); taken up after a crash, from ``parts_sent``
        with ``doubt`` checked first."""
        answer = answer_of(
            job,
            run_id,
            text,
            kind,
            per_user=self.per_user(),
            parts_sent=parts_sent,
            doubt=doubt,
            files=files,
        )
        final = await self.turns.deliver_job(answer)
        if final != "taken":  # another gateway adopted it: not ours to count either
            self.deliveries[final] += 1
        return final

    def _spawn(self, coro: Any, run_id: int, job_id: str) -> None:
        self._live[run_id] = job_id
        task = self._track(asyncio.create_task(coro, name=f"job:{job_id}:{run_id}"))

        def done(t: asyncio.Task[Any]) -> None:
            self._live.pop(run_id, None)
            if not t.cancelled() and t.exception() is not None:
                log.error("job.task_failed", run_id=run_id, error=repr(t.exception()))

        task.add_done_callback(done)

    def _track(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self) -> None:
        """Shutdown: running jobs are abandoned now (recorded so), undelivered answers are
        left to the next start."""
        live = list(self._live)
        self._queue.clear()  # queued runs are abandoned with the running ones
        self.turns.stop_jobs()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ledger.settle()  # a start or finish in flight lands before the stop's record
        try:
            await self.ledger.let_go(live, self.clock())
        except StoreError as exc:
            log.error("scheduler.stop_record_failed", error=str(exc))

    # -- what it shows ------------------------------------------------------------------

    def stalled(self) -> str | None:
        """Why the ticker looks stuck (for /readyz), or None."""
        limit = max(30.0, 6 * self.config.tick_s)
        if self.last_tick is not None and time.monotonic() - self.last_tick > limit:
            return f"scheduler: no tick for {time.monotonic() - self.last_tick:.0f} s"
        return None

    def status(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "last_tick_s_ago": None
            if self.last_tick is None
            else round(time.monotonic() - self.last_tick, 1),
            "running": self.running,
            "queued": len(self._queue),
            "max_parallel": self.parallel,
            "outcomes": dict(self.outcomes),
            "late_starts": self.late_starts,
            "deliveries": dict(self.deliveries),
            **self.counts,
        }


def _ids(got: list[tuple[Job, Plan, int]]) -> dict[str, list[Any]]:
    return {"job_ids": [j.id for j, _, _ in got], "run_ids": [i for _, _, i in got]}
