"""A scheduled job's run as a turn of its own session in the `GatewayRunner`: what the scheduler
hands the runner (`JobTurn`) and gets back (`TurnOutcome`), the port it does so through
(`JobTurns`), and where a job answer's delivery is recorded (`AnswerLedger`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from hermes_gateway.core.sessions import Pending
from hermes_gateway.events import Chat, MessageEvent, OutboundFile, OutboundKind

SILENT = "[SILENT]"  # a job's answer that says there is nothing worth telling: nothing is sent
JOB_PLATFORM = "cron"  # what a job turn's event names as its platform: there is no such adapter


@dataclass(frozen=True, slots=True)
class JobTurn:
    """One claimed run of a job, to be run as a turn of the job's own session."""

    session_key: str  # the job's own session, `cron:<job id>`
    text: str  # its prompt, prefaced
    run_id: int  # its row in the run ledger
    slot: int  # the slot it runs for (epoch seconds)
    timeout_s: float  # wall clock, from the turn's start (not while it waits for its session)
    # the platform its answer is delivered to (what `send_file` checks a file against); None:
    # the answer goes to no chat, so no file can go with it
    target: str | None = None


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """status: succeeded | failed | timed_out; ``text``: the answer (or why it failed);
    ``files``: what the answer sends after its text (`send_file`'s)."""

    status: str
    text: str
    error: str | None = None
    files: tuple[OutboundFile, ...] = ()


@dataclass(frozen=True, slots=True)
class JobAnswer:
    """A run's answer on its way to the job's target."""

    run_id: int
    text: str
    chat: Chat | None  # where it goes; None: nowhere (the answer stays in the job's runs)
    kind: OutboundKind = "reply"
    joins: str | None = None  # the chat session whose history the delivered answer joins
    parts_sent: int = 0  # taken up after a crash: the parts already out
    doubt: str | None = None  # ... and the part whose send the crash cut short (checked first)
    files: tuple[OutboundFile, ...] = ()  # sent after the text, a part each


class AnswerLedger(Protocol):
    """Where a job answer's delivery is recorded (the scheduler's run ledger)."""

    async def delivered(self, run_id: int, delivery: str, parts_sent: int | None = None) -> None:
        """The answer's delivery status (and how many parts went out)."""
        ...

    async def intent(self, run_id: int, index: int, after: str) -> bool:
        """Before part ``index`` goes out; False when another gateway took the delivery."""
        ...


class JobTurns(Protocol):
    """What the scheduler asks of the runner (`GatewayRunner` implements it)."""

    async def run_job(self, turn: JobTurn) -> TurnOutcome:
        """Run ``turn`` as a turn of its session; its outcome once the turn is stored."""
        ...

    async def deliver_job(self, answer: JobAnswer) -> str:
        """Deliver a run's answer: delivered, failed, skipped (nowhere to send it) or taken
        (another gateway adopted the delivery)."""
        ...

    def stop_jobs(self) -> None:
        """The scheduler stops: running job turns stop at their next safe point."""
        ...


@dataclass(eq=False)
class JobTicket:
    """A job turn inside the runner: its outcome, resolved once, and its wall-clock timer."""

    turn: JobTurn
    outcome: asyncio.Future[TurnOutcome]
    timer: asyncio.TimerHandle | None = None
    timed_out: bool = False

    def arm(self, on_timeout: Callable[[], None]) -> None:
        """The turn starts: ``on_timeout`` is called if it has not ended within its timeout."""
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.turn.timeout_s, self._expire, on_timeout)

    def _expire(self, on_timeout: Callable[[], None]) -> None:
        self.timed_out = True
        on_timeout()

    def resolve(self, outcome: TurnOutcome | None) -> None:
        """The turn's outcome (None: not known yet); the first one given stands."""
        if outcome is None:
            return
        if self.timer is not None:
            self.timer.cancel()
        if not self.outcome.done():
            self.outcome.set_result(outcome)

    def ended(self, status: str) -> TurnOutcome:
        """The outcome of a turn that ended with runner status ``status`` and no answer."""
        if self.timed_out:
            return TurnOutcome("timed_out", "", f"no answer within {self.turn.timeout_s:g} s")
        if status == "store_unavailable":
            return TurnOutcome("failed", "", "its history could not be loaded")
        return TurnOutcome("failed", "", status)


def job_event(turn: JobTurn) -> MessageEvent:
    """The event a job turn's run answers: in the job's session, from no user, on no adapter."""
    return MessageEvent(
        platform=JOB_PLATFORM,
        chat_type="dm",
        chat_id=turn.session_key,
        user_id="",
        message_id=f"cron-{turn.run_id}",
        text=turn.text,
        session_key=turn.session_key,
    )


def withdraw(items: Iterable[Pending], why: str) -> None:
    """Job turns dropped before they ran (a stop of their session, the `latest` policy, a
    full queue): their outcome says why; there is nobody else to tell."""
    for item in items:
        if item.job is not None:
            item.job.resolve(TurnOutcome("failed", "", why))
