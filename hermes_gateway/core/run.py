"""`Run`: one agent run, its lifecycle state (`RunState`), the messages it answers, and the
texts users see about them; `LiveRuns`, what the tools and memory read of the runs going on."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field, replace
from enum import Enum

from agent_core import RunControl, RunResult
from hermes_gateway.core.job_turns import SILENT, JobTicket
from hermes_gateway.core.pool import Tenant
from hermes_gateway.core.sessions import Pending, SessionTable
from hermes_gateway.events import MessageEvent, OutboundFile
from hermes_gateway.store.fence import Fence

QUEUE_FULL = (
    "I'm still working on your earlier messages and {n} more are already waiting, so I did "
    "not take this one. Please send it again when I've answered."
)
SUPERSEDED = "Skipped: a newer message of yours arrived while I was busy; I'll answer that one."
CRASHED = "Something went wrong on my side while answering (run {run_id}). Please try again."
STORE_DOWN = (
    "I can't reach my database right now, so I can't see our conversation and did not answer "
    "this. Please send it again in a minute."
)
EMPTY_ANSWER = "(The model returned an empty answer.)"
# a run the agent pool holds back by its user's or its chat's cap (`AgentPool.submit`)
WAITING = {
    "user": "I'm already answering your other conversations; this one starts when one ends.",
    "chat": "I'm already answering many people in this chat; yours starts when one of them ends.",
}
# a run the agent pool refused (`PoolFull`): its user's or chat's waiting runs were at the cap
TOO_MANY = {
    "user": (
        "I'm working on your other conversations and {n} more of yours are already waiting, so "
        "I did not take this one. Please send it again when I've answered."
    ),
    "chat": (
        "{n} messages in this chat are already waiting for me, so I did not take this one. "
        "Please send it again in a little while."
    ),
}


class RunState(Enum):
    """Where a run is in its life; `Run.move` allows only the moves in `_MOVES`."""

    RUNNING = "running"  # holds the session's guard; the agent is called or about to be
    INTERRUPTING = "interrupting"  # asked to stop at a safe point; the grace timer is armed
    SETTLING = "settling"  # the agent returned: storing and delivering its answer
    SHUTTING_DOWN = "shutting_down"  # interrupted by the gateway's stop: left for replay
    ABANDONED = "abandoned"  # given up: session freed, stopped turn recorded, result discarded
    DETACHED = "detached"  # stopped once its answer was in: it settles, the session is freed
    DONE = "done"  # finished while holding the guard: handed to the next turn or released


_MOVES: dict[RunState, frozenset[RunState]] = {
    RunState.RUNNING: frozenset(
        {
            RunState.INTERRUPTING,
            RunState.SETTLING,
            RunState.SHUTTING_DOWN,
            RunState.ABANDONED,
            RunState.DETACHED,
            RunState.DONE,
        }
    ),
    RunState.INTERRUPTING: frozenset(
        {
            RunState.SETTLING,
            RunState.SHUTTING_DOWN,
            RunState.ABANDONED,
            RunState.DETACHED,
            RunState.DONE,
        }
    ),
    RunState.SETTLING: frozenset({RunState.SHUTTING_DOWN, RunState.DETACHED, RunState.DONE}),
    # a grace timer armed before the shutdown may still expire during it
    RunState.SHUTTING_DOWN: frozenset({RunState.ABANDONED, RunState.DONE}),
    RunState.ABANDONED: frozenset(),  # final: a stopped run never speaks again
    RunState.DETACHED: frozenset(),
    RunState.DONE: frozenset(),
}
_STOPPED = frozenset({RunState.ABANDONED, RunState.DETACHED})


class IllegalMove(RuntimeError):
    """A run was asked to move between states its lifecycle does not connect."""


@dataclass(eq=False)
class Run:
    """One agent run answering ``items`` (several when messages were merged).

    Only `hermes_gateway.core.runner` and `hermes_gateway.core.settle` touch a run; other modules go
    through `GatewayRunner`'s methods.
    """

    key: str
    items: list[Pending]
    carried: list[Pending] = field(default_factory=list)  # interrupted earlier, answered here
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    control: RunControl = field(default_factory=RunControl)
    started: float = field(default_factory=time.monotonic)
    steered: list[Pending] = field(default_factory=list)
    future: asyncio.Future[RunResult] | None = None
    abandon: asyncio.Future[str] | None = None  # resolved when the run is given up
    task: asyncio.Task[None] | None = None
    grace_timer: asyncio.TimerHandle | None = None
    carry_forward: list[Pending] = field(default_factory=list)
    persist_task: asyncio.Task[None] | None = None  # writing an abandoned run's stopped turn
    state: RunState = RunState.RUNNING
    fence: Fence | None = None  # cluster mode: the session lease's token its writes carry
    files: list[OutboundFile] = field(default_factory=list)  # `send_file`'s, for the answer

    def move(self, to: RunState) -> None:
        """Go to ``to``; raises `IllegalMove` if the lifecycle has no such step."""
        if to not in _MOVES[self.state]:
            raise IllegalMove(f"run {self.run_id}: {self.state.value} -> {to.value}")
        self.state = to

    @property
    def stopped(self) -> bool:
        """Abandoned or detached: its deltas, tool events and late result are dropped."""
        return self.state in _STOPPED

    @property
    def shutdown(self) -> bool:
        """Interrupted by SIGTERM: left in the inbox for the next start."""
        return self.state is RunState.SHUTTING_DOWN

    @property
    def primary(self) -> MessageEvent:
        return self.items[-1].event

    @property
    def job(self) -> JobTicket | None:
        """The scheduled job's turn this run is (never merged with another), if it is one."""
        return self.items[0].job


@dataclass(frozen=True, slots=True)
class SessionView:
    """What `/status` shows of a session: its run's state and age, and what waits."""

    state: RunState | None  # None: idle
    seconds: float  # how long the active run has been going; 0 when idle
    pending: int
    traces: tuple[str, ...] = ()  # its latest runs' trace ids, newest first (traces on)


@dataclass(frozen=True, slots=True)
class Stopped:
    """What `/stop` ended: the messages its run answered and the pending ones it dropped."""

    answering: list[Pending]
    dropped: list[Pending]
    recording: asyncio.Task[None] | None  # writing the stopped turn to the history

    async def recorded(self) -> None:
        """Wait until the stopped turn is in the history (it belongs to the old session)."""
        if self.recording is not None:
            await self.recording


def merge_text(items: list[Pending]) -> str:
    """One user turn from several messages; names are kept when several people wrote."""
    if len(items) == 1:
        return items[0].event.text
    if len({p.event.user_id for p in items}) == 1:
        return "\n\n".join(p.event.text for p in items)
    return "\n\n".join(f"{p.event.user_name or p.event.user_id}: {p.event.text}" for p in items)


def inbox_ids(items: list[Pending]) -> list[int]:
    return [p.inbox_id for p in items if p.inbox_id is not None]


def with_text(event: MessageEvent, text: str) -> MessageEvent:
    return replace(event, text=text)


@dataclass(frozen=True, slots=True)
class FileTarget:
    """Where a live run's answer, and so a file sent with it, goes: ``platform`` (None: a
    scheduled job's answer that goes to no chat); ``note``: what the model should know."""

    platform: str | None
    note: str = ""


# A job's answer of exactly `[SILENT]` sends nothing: its files are the answer's, so they stay too
JOB_NOTE = f"If you answer exactly {SILENT}, nothing is sent, this file neither."


class LiveRuns:
    """Which message each session's run answers, and whether anything runs: read by the tool
    host and memory over the session table the runner writes (both on the loop thread). Built
    before the runner, so the parts its agents call back into need not hold the runner."""

    def __init__(self, table: SessionTable[Run] | None = None) -> None:
        self.table: SessionTable[Run] = table if table is not None else SessionTable()

    def current_event(self, key: str) -> MessageEvent | None:
        """The message the session's live run answers (the newest merged one), if any; a
        job's turn answers none (its tools act for no chat, as before it ran here)."""
        run = self.table.active(key)
        return None if run is None or run.stopped or run.job else run.primary

    def current_messages(self, key: str) -> list[MessageEvent]:
        """All the messages the session's active run answers, oldest first."""
        run = self.table.active(key)
        return [p.event for p in run.items] if run is not None and not run.job else []

    def attach_check(self, key: str) -> FileTarget | None:
        """Where the answer of the session's live run goes (a job's: to its target), or None
        when no run is live to take a file."""
        run = self.table.active(key)
        if run is None or run.stopped:
            return None
        if run.job is not None:
            return FileTarget(run.job.turn.target, JOB_NOTE)
        return FileTarget(run.primary.platform)

    def attach(self, key: str, file: OutboundFile) -> bool:
        """Add ``file`` to the answer of the session's live run; False when none is live."""
        run = self.table.active(key)
        if run is None or run.stopped:
            return False
        run.files.append(file)
        return True

    def counts(self) -> dict[str, int]:
        """Sessions with a run (``active``), messages waiting, sessions tracked."""
        return self.table.stats()

    def busy(self) -> bool:
        """A run is in progress (memory's auto-retain waits for a quiet moment)."""
        return self.counts()["active"] > 0


def tenant_of(event: MessageEvent) -> Tenant:
    """Whom a run answering ``event`` counts against in the agent pool: its user (across all
    their sessions) and its chat (all of a group's users)."""
    return Tenant(f"{event.platform}:{event.user_id}", f"{event.platform}:{event.chat_id}")
