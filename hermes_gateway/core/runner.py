"""`GatewayRunner`: one active run per session, busy policies, and agents on the shared pool.

Everything here runs on the event-loop thread, so the session guard is a plain check-and-set
and the step "release the guard or hand it to the next pending message" has no await in it:
a message can never arrive between a run's end and the drain of its pending slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import RunResult
from agent_core.agent import INTERRUPTED_MARK
from hermes_gateway.agents.cache import AgentCache, SessionContext
from hermes_gateway.config import RunnerConfig
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.job_settle import JobSettle
from hermes_gateway.core.job_turns import (
    AnswerLedger,
    JobAnswer,
    JobTicket,
    JobTurn,
    TurnOutcome,
    job_event,
    withdraw,
)
from hermes_gateway.core.pool import AgentPool, Tenant, Wait
from hermes_gateway.core.probation import Probation
from hermes_gateway.core.progress import Progress
from hermes_gateway.core.run import (
    CRASHED,
    QUEUE_FULL,
    STORE_DOWN,
    SUPERSEDED,
    TOO_MANY,
    WAITING,
    LiveRuns,
    Run,
    RunState,
    SessionView,
    Stopped,
    inbox_ids,
    merge_text,
    tenant_of,
    with_text,
)
from hermes_gateway.core.session_leases import SessionLeases, SoleLeases
from hermes_gateway.core.sessions import Pending, SessionTable
from hermes_gateway.core.settle import Settler, TurnDone
from hermes_gateway.errors import PoolFull, StoreError
from hermes_gateway.events import MessageEvent
from hermes_gateway.metrics import Metrics
from hermes_gateway.platforms.adapter import StreamSink
from hermes_gateway.store.store import Fence, Store
from hermes_gateway.traces import OFF, Tracer

if TYPE_CHECKING:
    from hermes_gateway.media_in import InboundMedia

log = structlog.get_logger("hermes.runner")


class GatewayRunner:
    """Routes accepted messages to runs according to `runner.busy_policy`; each session runs
    under its lease from ``leases`` (one process: `SoleLeases`, held for ever)."""

    def __init__(
        self,
        config: RunnerConfig,
        *,
        store: Store,
        bus: EventBus,
        pool: AgentPool,
        agents: AgentCache,
        delivery: Delivery,
        metrics: Metrics,
        stream_for: Callable[[MessageEvent], StreamSink | None] | None = None,
        probation: Probation[Run] | None = None,
        busy_policy_for: Callable[[str], str] | None = None,
        leases: SessionLeases | None = None,
        runs: LiveRuns | None = None,
        on_turn: TurnDone | None = None,
        job_ledger: AnswerLedger | None = None,
        media: InboundMedia | None = None,
        tracer: Tracer = OFF,
    ) -> None:
        self.config = config
        # a platform may have a policy of its own (the local API's is `queue`)
        self._policy_for = busy_policy_for or (lambda platform: config.busy_policy)
        self.store = store
        self.bus = bus
        self.pool = pool
        self.agents = agents
        self.metrics = metrics
        self.tracer = tracer
        self.settler = Settler(store, delivery, metrics, on_turn)
        self.jobs = JobSettle(store, delivery, agents, job_ledger)  # scheduled jobs' turns
        self.runs = runs if runs is not None else LiveRuns()  # what the tools read of it
        self._table: SessionTable[Run] = self.runs.table
        self._stream_for = stream_for or (lambda event: None)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.draining = False
        # a run's fencing token and lease deadline (it calls nothing past it); a renewal
        # extends it, a loss relinquishes its session
        self.leases: SessionLeases = SoleLeases() if leases is None else leases
        self._persisting: dict[str, asyncio.Task[Any]] = {}  # a stopped turn being written
        self.probation: Probation[Run] = probation or Probation()
        self.media = media  # voice notes transcribed, images for a vision model
        self._probation_timer: asyncio.TimerHandle | None = None
        self.leases.bind(self)  # last: what the leases call on is all there now

    # -- intake -------------------------------------------------------------------------

    async def dispatch(self, event: MessageEvent, inbox_id: int | None) -> None:
        """Start a run for ``event`` or apply the busy policy; returns without waiting."""
        item = Pending(event, inbox_id)
        run = self._table.active(event.session_key)
        if not self.new_here([item]):
            return
        if run is None:
            self.start([item])
            return
        policy = self._policy_for(event.platform)
        self.tracer.annotate("hermes.busy_policy", policy)  # on the message's span
        if policy == "steer":
            run.control.steer(event.text)
            run.steered.append(item)
            self.bus.emit("message_pending", event, run_id=run.run_id, policy=policy)
            return
        if policy == "latest":
            for old in self._table.replace_pending(event.session_key, item):
                await self.settler.tell_dropped(old, SUPERSEDED, "superseded")
        elif self._table.pending_count(event.session_key) >= self.config.queue_max:
            await self.settler.tell_dropped(
                item, QUEUE_FULL.format(n=self.config.queue_max), "queue_full"
            )
            return
        else:
            self._table.push(event.session_key, item)
        self.bus.emit("message_pending", event, run_id=run.run_id, policy=policy)
        if policy == "interrupt":
            self.interrupt(run, grace=self.config.stop_grace_s)

    def enqueue(self, event: MessageEvent, inbox_id: int | None, text: str) -> int:
        """`/queue`: a separate turn after whatever is pending; returns the queue position."""
        item = Pending(with_text(event, text), inbox_id, separate=True)
        if self._table.active(event.session_key) is None:
            self.start([item])
            return 0
        return self._table.push(event.session_key, item)

    def steer(self, event: MessageEvent, inbox_id: int | None, text: str) -> bool:
        """`/steer`: inject into the running loop; False when nothing runs (caller starts one)."""
        run = self._table.active(event.session_key)
        if run is None:
            self.start([Pending(with_text(event, text), inbox_id)])
            return False
        run.control.steer(text)
        run.steered.append(Pending(with_text(event, text), inbox_id))
        return True

    # -- scheduled jobs' turns (`hermes_gateway.core.job_turns.JobTurns`) -----------------

    async def run_job(self, turn: JobTurn) -> TurnOutcome:
        """A job's run as a turn of its session: it waits behind what runs or waits there
        (whatever the busy policy: it interrupts, steers and merges with nothing), then runs
        like a message; returns its outcome once its turn is stored."""
        if self.draining:
            return TurnOutcome("failed", "", "the gateway is stopping")
        ticket = JobTicket(turn, asyncio.get_running_loop().create_future())
        item = Pending(job_event(turn), None, separate=True, job=ticket)
        self.tracer.adopt(item.event)  # the scheduler's `job.run` span is its run's parent
        if self._table.active(turn.session_key) is None:
            self.start([item])
        else:
            self._table.push(turn.session_key, item)
        return await ticket.outcome

    async def deliver_job(self, answer: JobAnswer) -> str:
        """A job run's answer to its target (`JobSettle.deliver`)."""
        return await self.jobs.deliver(answer)

    def stop_jobs(self) -> None:
        """The scheduler stops: job turns running stop at their next safe point."""
        for run in list(self._table.active_runs()):
            if run.job is not None:
                run.control.interrupt()

    # -- runs ---------------------------------------------------------------------------

    def start(self, items: list[Pending], carried: list[Pending] | None = None) -> Run:
        run = Run(items[0].event.session_key, items, carried or [])
        self._lease(run)
        if not self._table.acquire(run.key, run):
            raise RuntimeError(f"session {run.key} already has an active run")
        self._spawn(run)
        return run

    def _lease(self, run: Run) -> None:
        """A run writes under its session's lease; a job's turn under its run's claim in the
        run ledger, which no other instance takes while it lives."""
        if run.job is None:
            run.fence = self.fence_for(run.key)
            run.control.expire_at(self.leases.until(run.key))

    def _spawn(self, run: Run) -> None:
        run.abandon = asyncio.get_running_loop().create_future()
        if not self.probation.holds(run, inbox_ids(run.items)):
            self._launch(run)
            return
        # it waits, holding its session: soon, so every suspect a replay queues is a candidate
        self._try_probation()

    def _launch(self, run: Run) -> None:
        run.started = time.monotonic()  # a suspect run's wait for its turn is not its run
        attrs = {"hermes.run.merged": len(run.items), "hermes.job": run.job is not None}
        work = self.tracer.run(run.primary, attrs, self._execute(run))
        run.task = asyncio.create_task(work, name=f"run:{run.key}:{run.run_id}")
        self._tasks.add(run.task)
        run.task.add_done_callback(self._tasks.discard)
        if run.job is not None:  # its wall-clock timeout: interrupted, then abandoned
            run.job.arm(lambda: self.interrupt(run, grace=self.config.stop_grace_s))
        if self.probation.on_probation(run):
            log.info("run.probation", run_id=run.run_id, inbox_ids=inbox_ids(run.items))
            run.task.add_done_callback(lambda _t: self._probation_over(run))

    def _try_probation(self) -> None:
        """Start the next waiting suspect run if none is in flight, once the calm is over."""
        if self._probation_timer is not None or self.draining:
            return
        delay = self.probation.due_in()
        if delay is not None:
            loop = asyncio.get_running_loop()
            self._probation_timer = loop.call_later(delay, self._on_probation)

    def _on_probation(self) -> None:
        self._probation_timer = None
        if self.draining:
            return
        nxt = self.probation.next(lambda r: r.stopped or r.shutdown)
        if nxt is not None:
            self._launch(nxt)
        else:  # the loop runs a timer up to a millisecond early: `due_in` says when to retry
            self._try_probation()

    def _probation_over(self, run: Run) -> None:
        """The suspect run ended: the next waiting one starts. Its entries, if still
        unanswered (an abandoned run's thread may go on), are no longer the one suspect; after
        a clean stop's interruption they are not in flight at all (`interrupt_all` says so)."""
        if not run.shutdown:
            self._background(self.store.begin_attempt(inbox_ids(run.items)))
        self.probation.release(run, inbox_ids(run.items))
        self._try_probation()

    async def _execute(self, run: Run) -> None:
        structlog.contextvars.bind_contextvars(
            session_key=run.key, run_id=run.run_id, platform=run.primary.platform
        )
        self.bus.emit("processing_start", run.primary, run_id=run.run_id, merged=len(run.items))
        status, error = "crashed", None
        usage: dict[str, int] = {}  # the tokens its model calls used, also when interrupted
        try:
            if run.job is not None and run.job.outcome.done():
                status = "withdrawn"  # nobody waits for it now: the scheduler stopped
                return
            # before it can crash us: the next start's verdict reads it
            alone = self.probation.on_probation(run)
            await self.store.begin_attempt(inbox_ids(run.items), probation=alone)
            try:
                ctx = await self.agents.acquire(run.key)
            except StoreError as exc:  # its history cannot load: say so, not "crashed"
                log.error("run.history_unavailable", error=str(exc))
                status = "store_unavailable"
                if run.job is None:
                    await self.settler.reply(run, STORE_DOWN, "error", status)
                return
            try:
                result = await self._call_agent(run, ctx)
            except PoolFull as exc:  # its user or chat has as many waiting as allowed
                status = "refused"
                text = TOO_MANY[exc.kind].format(n=exc.cap)
                await self.settler.reply(run, text, "notice", status)
                return
            finally:
                self.agents.release(run.key, ctx)
            status, error, usage = self._verdict(run, result)
            if result is not None and status != "lease_lost":
                await self._settle_result(run, ctx, result)
        except Exception:
            log.exception("run.crashed")
            if not run.stopped and not run.shutdown and run.job is None:
                await self.settler.reply(run, CRASHED.format(run_id=run.run_id), "error", "crashed")
        finally:  # cancelled by a shutdown that stopped waiting for it: not a crash
            status = "interrupted" if status == "crashed" and run.shutdown else status
            self._ended(run, status, error, usage)

    def _verdict(
        self, run: Run, result: RunResult | None
    ) -> tuple[str, str | None, dict[str, int]]:
        """How the run ended, from what the agent gave back (None: abandoned): its status,
        error and the tokens its model calls used. A lease that ran out while it ran is given
        up here: nothing of the run is written or sent."""
        if result is None:
            return "abandoned", None, {}
        if run.control.expired and not run.stopped:
            log.warning("run.lease_expired", result=result.status)
            self.leases.lost(run.key)
            return "lease_lost", None, {}
        # also after a /stop that raced with the answer: it was ready, so it goes out
        return result.status, result.error, result.usage

    async def _settle_result(self, run: Run, ctx: SessionContext, result: RunResult) -> None:
        """A chat's turn is settled and its reply sent; a job's turn is stored and its
        outcome (with the files `send_file` gave it) handed back to the scheduler."""
        self._begin_settling(run, result)
        if run.job is None:
            await self.settler.settle(run, ctx, result)
            return
        files = tuple(run.files)
        outcome = await self.jobs.settle(run.job, ctx, result, shutdown=run.shutdown, files=files)
        run.job.resolve(outcome)

    def _ended(self, run: Run, status: str, error: str | None, usage: dict[str, int]) -> None:
        """The run's end, whatever it was: its job's outcome, metrics, trace, log line and
        lifecycle event, and the session's next run."""
        if run.job is not None:
            run.job.resolve(run.job.ended(status))
        elapsed = time.monotonic() - run.started
        self.metrics.run_duration.labels(status).observe(elapsed)
        self.tracer.annotate("hermes.run.status", status)
        say, why = (log.warning, {"error": error}) if error else (log.info, {})
        say("run.finished", status=status, seconds=round(elapsed, 3), **why)
        self.bus.emit(
            "processing_complete", run.primary, run_id=run.run_id, status=status, usage=usage
        )
        if not run.stopped:  # a stopped run no longer holds the guard
            run.move(RunState.DONE)
            self._next(run)

    async def _call_agent(self, run: Run, ctx: SessionContext) -> RunResult | None:
        sink = self._stream_for(run.primary)
        progress = Progress(
            run.primary,
            run.run_id,
            lambda: run.stopped,
            sink,
            bus=self.bus,
            metrics=self.metrics,
            tracer=self.tracer,
        )
        self.bus.emit("agent_run", run.primary, run_id=run.run_id)
        sent = run.primary.history  # a stateless API request brings its own
        text, images = await self._turn_input(run)
        run.future = self.pool.submit(
            self.tracer.waited(ctx.agent.run_conversation),  # its wait for a thread: a span
            text,
            [*sent, *ctx.history] if sent else ctx.history.snapshot(),
            control=run.control,
            on_delta=progress.delta if sink is not None else None,
            on_event=progress.event,
            # a job's turn never takes the share kept for chats, nor counts against a user
            tenant=Tenant(job=True) if run.job else tenant_of(run.primary),
            on_wait=lambda wait: self._tell_waiting(run, wait),
            **({"images": images} if images else {}),
        )
        assert run.abandon is not None
        waits: list[asyncio.Future[Any]] = [run.future, run.abandon]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if not run.future.done() or run.state is RunState.ABANDONED:
            return None  # abandoned: the thread's late result is discarded
        return run.future.result()

    async def _turn_input(self, run: Run) -> tuple[str, tuple[str, ...]]:
        """The turn's text (voice notes transcribed) and images; a failure's notice is sent."""
        if self.media is None or run.job is not None:
            return merge_text(run.items), ()
        turn = await self.media.prepare([p.event for p in run.items])
        for notice in turn.notices:
            self._background(self.settler.tell_waiting(run, notice))
        items = [replace(p, event=e) for p, e in zip(run.items, turn.events, strict=True)]
        return merge_text(items), turn.images

    def _tell_waiting(self, run: Run, wait: Wait) -> None:
        """A run its user's or chat's cap holds is told so. One that waits for a free thread
        is not: that wait is short and shared, its typing indicator is on already, and
        `/status` counts it."""
        text = WAITING.get(wait.reason)
        if text is not None:
            self._background(self.settler.tell_waiting(run, text))

    def _begin_settling(self, run: Run, result: RunResult) -> None:
        """Steered messages the loop did not take wait again, first in line. A stopped or
        shutting-down run keeps its state: that is what tells the settle step what to skip."""
        if unused := run.steered[result.steered :]:
            self._table.push_front(run.key, [Pending(p.event, p.inbox_id) for p in unused])
        if run.state in (RunState.RUNNING, RunState.INTERRUPTING):
            run.move(RunState.SETTLING)

    def _next(self, run: Run) -> None:
        """Hand the guard to the next pending turn, or release it. No await: atomic."""
        if run.grace_timer is not None:
            run.grace_timer.cancel()
        merge = self._policy_for(run.items[0].event.platform) not in ("queue", "latest")
        items = [] if self.draining else self._table.take_turn(run.key, merge=merge)
        if items:
            nxt = Run(run.key, items, run.carry_forward)
            self._lease(nxt)
            self._table.hand_over(run.key, run, nxt)
            self._spawn(nxt)
            return
        self._table.release(run.key, run)
        if run.carry_forward and not self.draining:
            # interrupted, yet nothing pending took its place (the interrupter was withdrawn)
            self._background(
                self.settler.reply(run, "Interrupted.", "notice", "interrupted", run.carry_forward)
            )

    # -- interrupting, stopping, shutting down ------------------------------------------

    def interrupt(self, run: Run, grace: float) -> None:
        """Ask the run to stop at its next safe point; abandon it if it has not within
        ``grace`` seconds (a wedged tool or model call must not hold the session)."""
        run.control.interrupt()
        if run.state is RunState.RUNNING:
            run.move(RunState.INTERRUPTING)
        if run.grace_timer is None and not run.stopped:
            loop = asyncio.get_running_loop()
            run.grace_timer = loop.call_later(grace, self._grace_expired, run)

    def _grace_expired(self, run: Run) -> None:
        if run.stopped or run.future is None or run.future.done():
            return
        if self._table.active(run.key) is not run:
            return
        log.warning("run.abandoned", reason="interrupt_grace", run_id=run.run_id)
        self.abandon(run)
        if run.job is None:  # a job's turn answers nobody: its outcome says it was stopped
            run.carry_forward = run.carried + run.items + run.steered
        self._next(run)

    def abandon(self, run: Run, *, record: bool = True) -> None:
        """Give up on ``run`` now: the session is free at once, the stopped message stays in
        the history (unless not ``record``: then it stays unanswered in the inbox), and
        whatever its thread returns later is logged and discarded."""
        answered = run.future is not None and run.future.done()
        # the answer is already being settled and delivered: let it finish, detached
        run.move(RunState.DETACHED if answered else RunState.ABANDONED)
        run.control.interrupt()
        if run.grace_timer is not None:
            run.grace_timer.cancel()
        if run.abandon is not None and not run.abandon.done():
            run.abandon.set_result("abandoned")
        if answered:
            return
        if record:
            self._record_stopped(run)
        fut = run.future
        if fut is not None and not fut.done():
            self.pool.note_abandoned(1)
            fut.add_done_callback(lambda f: self._late_result(run, f))

    def _record_stopped(self, run: Run) -> None:
        turn = [{"role": "user", "content": merge_text(run.items)}]
        turn.append({"role": "assistant", "content": INTERRUPTED_MARK})
        ctx = self.agents.peek(run.key)
        if ctx is not None:
            ctx.history.extend(turn)
        self.agents.renew_agent(run.key)
        run.persist_task = self._background(self.settler.persist_abandoned(run, turn))
        self._persisting[run.key] = task = run.persist_task
        task.add_done_callback(
            lambda t: (
                self._persisting.pop(run.key, None) if self._persisting.get(run.key) is t else None
            )
        )

    def _late_result(self, run: Run, fut: asyncio.Future[RunResult]) -> None:
        self.pool.note_abandoned(-1)
        status = "cancelled" if fut.cancelled() else ("error" if fut.exception() else "returned")
        log.info("run.late_result_discarded", run_id=run.run_id, session_key=run.key, how=status)

    def stop(self, key: str) -> Stopped | None:
        """`/stop`: abandon the active run and drop what is pending; the caller tells the user.
        None when nothing runs."""
        run = self._table.active(key)
        if run is None:
            return None
        self.abandon(run)
        dropped = self._table.pop_all(key)
        withdraw(dropped, "stopped")
        self._table.release(key, run)
        return Stopped(run.items + run.carried + run.steered, dropped, run.persist_task)

    # -- the session leases: what they ask of the runner (`LeaseHolder`) -------------------

    def fence_for(self, key: str) -> Fence | None:
        """The token a run of the session writes under (a takeover's replay reads it too)."""
        return self.leases.fence_for(key)

    def relinquish(self, key: str) -> list[Pending]:
        """The session's lease was lost. Its run and what waits are dropped here, silently and
        with nothing written: the session's next owner answers them from the inbox. Returns
        what was dropped (the run's messages, then those waiting)."""
        run = self._table.active(key)
        dropped = [*(run.items if run is not None else []), *self._table.pop_all(key)]
        withdraw(dropped, "its session was given up")
        if run is not None:
            self.abandon(run, record=False)
            self._table.release(key, run)
            # given up, not crashed: its attempt must not count toward quarantine
            self._background(self.store.undo_attempt(inbox_ids(run.items)))
        self.agents.evict(key)  # its history may hold a turn the store refused
        self.store.forget_session(key)
        return dropped

    def forget(self, key: str) -> None:
        """The session's lease was let go while idle, or is newly taken: its cached context
        and current session row are read again from the store, since another instance may
        have run turns of it (or started a new session with /new) meanwhile."""
        if self._table.active(key) is None:  # a running turn's context is its own
            self.agents.evict(key)
        self.store.forget_session(key)

    def extend(self, key: str, until: float) -> None:
        """The session's lease was renewed: its run may go on calling the model until then."""
        run = self._table.active(key)
        if run is not None:
            run.control.expire_at(until)

    def knows(self, key: str, inbox_id: int) -> bool:
        """Whether the entry is in the session's active run or waits in its pending slot."""
        run = self._table.active(key)
        ran = [] if run is None else run.items + run.carried + run.steered
        return any(p.inbox_id == inbox_id for p in ran + self._table.pending(key))

    def new_here(self, items: list[Pending]) -> list[Pending]:
        """``items`` less the entries already here: one entry can arrive twice (a takeover's
        replay and a "queued" notice each check `knows`, then await the store), and a second
        copy would run it twice. No await between this and the hand-over: atomic."""
        return [
            p
            for p in items
            if p.inbox_id is None or not self.knows(p.event.session_key, p.inbox_id)
        ]

    def idle(self, key: str) -> bool:
        """Nothing runs, waits or is still being written for the session."""
        table = self._table
        return (
            table.active(key) is None
            and not table.pending_count(key)
            and key not in self._persisting
        )

    # -- what other modules may know of a session -----------------------------------------

    def busy(self, key: str) -> bool:
        return self._table.active(key) is not None

    def session_keys(self) -> list[str]:
        """The sessions with an active run or a message waiting (the dashboard lists them)."""
        return self._table.keys()

    def pending_count(self, key: str) -> int:
        return self._table.pending_count(key)

    def describe(self, key: str) -> SessionView:
        run, traces = self._table.active(key), self.tracer.recent(key)
        if run is None:
            return SessionView(None, 0.0, self._table.pending_count(key), traces)
        age = time.monotonic() - run.started
        return SessionView(run.state, age, self._table.pending_count(key), traces)

    def current_event(self, key: str) -> MessageEvent | None:
        """The message the session's live run answers (the newest merged one), if any."""
        return self.runs.current_event(key)

    def current_messages(self, key: str) -> list[MessageEvent]:
        """All the messages the session's active run answers, oldest first."""
        return self.runs.current_messages(key)

    def resume(self, items: list[Pending]) -> None:
        """Replay: answer ``items`` (one session's) now, or before what waits if it is busy.
        A suspect (see `Probation`) gets a turn of its own."""
        key, items = items[0].event.session_key, self.new_here(items)
        if items and self._table.active(key) is None:
            cut = next((i for i, p in enumerate(items) if p.separate), len(items))
            turn, rest = (items[:1], items[1:]) if cut == 0 else (items[:cut], items[cut:])
            self._table.push_front(key, rest)
            self.start(turn)
        elif items:
            self._table.push_front(key, items)

    def counts(self) -> dict[str, int]:
        """Sessions with a run (``active``), messages waiting, sessions tracked."""
        return self.runs.counts()

    async def drain(self, timeout: float) -> bool:
        """Let active runs finish (no new ones start); True if all did within ``timeout``."""
        self.draining = True
        tasks = [t for t in self._tasks if not t.done()]
        return not tasks or not (await asyncio.wait(tasks, timeout=timeout))[1]

    async def interrupt_all(self, timeout: float = 1.0) -> None:
        """Shutdown: interrupt every run, persist nothing half-done, leave them for replay."""
        runs = list(self._table.active_runs())
        for run in runs:
            run.move(RunState.SHUTTING_DOWN)
            run.control.interrupt()
            self.probation.forget(run)
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
        # stopped on purpose, not by a crash: the replay must not count it toward quarantine
        await self.store.undo_attempt(inbox_ids([p for r in runs for p in r.items]))

    def _background(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def status(self) -> dict[str, Any]:
        return {**self._table.stats(), "cached_agents": len(self.agents)}

    def suspect(self, suspects: dict[int, int]) -> None:
        """The start's verdict: these inbox entries (id -> crashes counted) run on probation."""
        self.probation.suspect(suspects)
