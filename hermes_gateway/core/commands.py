"""Gateway commands (`/stop`, `/new`, `/status`, `/help`, `/model`, `/queue`, `/steer`,
`/approve`, `/deny`, `/compact`).

They bypass the session guard: a command is answered at once, whatever the agent is doing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from agent_core import ModelError
from hermes_gateway.agents.cache import AgentCache, SessionContext
from hermes_gateway.agents.tool_host import REFUSED, who
from hermes_gateway.config import Config
from hermes_gateway.config.live import LiveConfig
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.pool import AgentPool
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.core.sessions import Pending
from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.store.store import Store

if TYPE_CHECKING:
    from hermes_gateway.agents.tool_host import GatewayToolHost
    from hermes_gateway.scheduler.job_service import JobService

log = structlog.get_logger("hermes.commands")


@dataclass(frozen=True, slots=True)
class CommandInfo:
    """One gateway command as `/help` and the platforms' command menus show it."""

    name: str
    summary: str  # what it does, as a `/help` line says it
    argument: str = ""  # the text it takes after its name ("message"), if any
    approvals: bool = False  # only where the platform can ask the user for an approval

    @property
    def description(self) -> str:
        """The summary as a menu entry shows it (capitalized)."""
        return self.summary[:1].upper() + self.summary[1:]


# the one list of commands: `/help`, the parser, and every platform's menu come from it
MENU: tuple[CommandInfo, ...] = (
    CommandInfo("stop", "stop what I'm doing now (the session takes new messages at once)"),
    CommandInfo("new", "start a new conversation (forget this one's history)"),
    CommandInfo("status", "what this session is doing"),
    CommandInfo("queue", "answer this after the current work, as its own turn", "message"),
    CommandInfo("steer", "add guidance to the work in progress", "message"),
    CommandInfo("model", "which model answers"),
    CommandInfo("approve", "let me run the command I asked about", approvals=True),
    CommandInfo("deny", "refuse the command I asked to run", approvals=True),
    CommandInfo("compact", "summarize the older part of this conversation now"),
    CommandInfo("cron", "this chat's scheduled jobs (/cron pause|resume|run|rm|runs ID)"),
    CommandInfo("help", "list the commands"),
)


def menu(*, approvals: bool = True) -> tuple[CommandInfo, ...]:
    """The commands a platform's menu lists; ``approvals``: it can ask approval questions."""
    return tuple(c for c in MENU if approvals or not c.approvals)


def _help_line(c: CommandInfo) -> str:
    argument = f" <{c.argument}>" if c.argument else ""
    return f"/{c.name}{argument} - {c.summary}"


HELP = "\n".join(["Commands:", *map(_help_line, MENU)])
ALIASES = {"reset": "new", "cancel": "stop", "q": "queue"}


def parse_command(text: str) -> tuple[str, str] | None:
    """``("stop", "")`` for ``/stop`` or ``/stop@bot``; None for anything else."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    head, _, rest = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    name = ALIASES.get(name, name)
    if name not in Commands.NAMES:
        return None
    return name, rest.strip()


class Commands:
    NAMES = frozenset(c.name for c in MENU)

    def __init__(
        self,
        config: LiveConfig,
        runner: GatewayRunner,
        store: Store,
        delivery: Delivery,
        bus: EventBus,
        agents: AgentCache,
        pool: AgentPool,
        *,
        tool_host: GatewayToolHost | None = None,
        jobs: JobService | None = None,
    ) -> None:
        self.live = config
        self.tool_host = tool_host
        self.runner = runner
        self.store = store
        self.delivery = delivery
        self.bus = bus
        self.agents = agents
        self.pool = pool
        self.jobs = jobs  # the scheduler's, when scheduler.enabled
        self._handlers: dict[str, Callable[[MessageEvent, int | None, str], Awaitable[None]]] = {
            "stop": self._stop,
            "new": self._new,
            "status": self._status,
            "help": self._help,
            "model": self._model,
            "queue": self._queue,
            "steer": self._steer,
            "approve": self._approve,
            "deny": self._deny,
            "compact": self._compact,
            "cron": self._cron,
        }

    @property
    def config(self) -> Config:
        return self.live.now

    async def handle(self, name: str, args: str, event: MessageEvent, inbox_id: int | None) -> None:
        log.info("command", command=name, session_key=event.session_key)
        await self._handlers[name](event, inbox_id, args)

    async def _answer(
        self,
        event: MessageEvent,
        inbox_ids: list[int | None],
        text: str,
        extra: tuple[str, ...] = (),
    ) -> None:
        out = OutboundMessage.to(event, text, "notice", answers=(event.message_id, *extra))
        await self.delivery.send(out, inbox_ids, outcome="command", event=event)

    async def _stop(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        outcome = self.runner.stop(event.session_key)
        if self.tool_host is not None:
            self.tool_host.end_browser(event.session_key)  # a page mid-load stops too
        if outcome is None:
            await self._answer(event, [inbox_id], "Nothing is running.")
            return
        stopped, dropped = outcome.answering, outcome.dropped
        text = "Stopped."
        if dropped:
            text += f" Dropped {len(dropped)} waiting message(s)."
        await self._answer(
            event,
            [inbox_id, *(p.inbox_id for p in stopped)],
            text,
            tuple(p.event.message_id for p in stopped + dropped),
        )
        await self._mark_dropped(dropped)

    async def _new(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        outcome = self.runner.stop(event.session_key)
        if self.tool_host is not None:
            self.tool_host.end_browser(event.session_key)  # the new conversation's cookies too
        if outcome is not None:
            await outcome.recorded()  # the stopped turn belongs to the old session
        try:
            await self.store.reset_session(event.session_key)
        except StoreError as exc:
            log.error("session.reset_failed", error=str(exc))
            await self._answer(
                event,
                [inbox_id],
                "I could not start a new conversation: the "
                "database is unavailable. Please try again shortly.",
            )
            return
        self.agents.evict(event.session_key)
        self.bus.emit("session_reset", event)
        stopped, dropped = (outcome.answering, outcome.dropped) if outcome else ([], [])
        await self._answer(
            event,
            [inbox_id, *(p.inbox_id for p in stopped)],
            "Started a new conversation.",
            tuple(p.event.message_id for p in stopped + dropped),
        )
        await self._mark_dropped(dropped)

    async def _mark_dropped(self, dropped: list[Pending]) -> None:
        ids = [p.inbox_id for p in dropped if p.inbox_id is not None]
        if ids:
            try:
                await self.store.mark(ids, "dropped")
            except StoreError as exc:
                log.error("inbox.mark_failed", error=str(exc))

    async def _history_size(self, key: str, ctx: SessionContext | None) -> str:
        if ctx is not None:
            return str(len(ctx.history))
        try:  # not cached (just reset, or evicted): the store has it
            return str(len(await self.store.history(key)))
        except StoreError:
            return "unknown (the database is unavailable)"

    async def _status(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        key = event.session_key
        view = self.runner.describe(key)
        ctx = self.agents.peek(key)
        state = "idle" if view.state is None else f"working for {view.seconds:.0f}s"
        pool = self.pool.snapshot()
        lines = [
            f"Session: {key}",
            f"State: {state}; {view.pending} message(s) waiting",
            f"History: {await self._history_size(key, ctx)} message(s)",
            f"Model: {self.config.model.name}",
            f"Busy policy: {self.config.busy_policy_for(event.platform)}",
            f"Workers: {pool['busy']}/{pool['workers']} busy, {pool['waiting']} waiting",
        ]
        if view.traces:  # traces on: where the operator finds its latest runs
            lines.append(f"Traces: {', '.join(view.traces)}")
        await self._answer(event, [inbox_id], "\n".join(lines))

    async def _help(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        await self._answer(event, [inbox_id], HELP)

    async def _model(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        await self._answer(
            event, [inbox_id], f"Model: {self.config.model.name} at {self.config.model.base_url}"
        )

    async def _queue(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        if not args:
            await self._answer(event, [inbox_id], "Usage: /queue <message>")
            return
        position = self.runner.enqueue(event, inbox_id, args)
        if position:
            await self._ack(event, f"Queued ({position} ahead of it).")

    async def _steer(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        if not args:
            await self._answer(event, [inbox_id], "Usage: /steer <message>")
            return
        if self.runner.steer(event, inbox_id, args):
            await self._ack(event, "Noted; I'll take that into account in the current work.")

    async def _approve(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        await self._decide(event, inbox_id, approved=True)

    async def _deny(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        await self._decide(event, inbox_id, approved=False)

    async def _decide(self, event: MessageEvent, inbox_id: int | None, *, approved: bool) -> None:
        """Only this path answers an approval: a real inbound command from the user whose
        message started the run; text from tools or the model never comes here, and in a
        shared thread another participant's answer changes nothing."""
        outcome, ticket = self.tool_host.answer(event, approved) if self.tool_host else ("", None)
        if ticket is None:
            text = "Nothing is waiting for approval."
        elif outcome == "refused":
            text = REFUSED.format(who=who(ticket.event))
        else:
            text = "Approved; running it." if approved else "Denied; I won't run it."
        await self._answer(event, [inbox_id], text)

    async def _compact(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        """Summarize the older turns now. No guard is taken: if a run changes the history
        meanwhile, the summary is dropped (and said so) rather than overwrite that turn."""
        key = event.session_key
        if self.runner.busy(key):
            await self._answer(event, [inbox_id], "I'm working; send /compact when I've answered.")
            return
        ctx = await self.agents.acquire(key)
        try:
            snapshot = ctx.history.snapshot()
            keep = self.config.model.context_budget // 8
            try:
                compaction = await self.pool.submit(ctx.agent.compact, snapshot, keep_tokens=keep)
            except ModelError as exc:
                await self._answer(event, [inbox_id], f"I could not compact: {exc.user_message}")
                return
            if compaction is None:
                text = "Nothing to compact yet."
            elif len(ctx.history) != len(snapshot):
                text = "The conversation moved on while I summarized it; send /compact again."
            else:
                ctx.history = compaction.history
                try:
                    await self.store.complete_turn(key, [compaction.marker], [], "", "compact")
                except StoreError as exc:
                    log.error("compact.persist_failed", error=str(exc))
                text = (
                    f"Compacted: {compaction.summarized} earlier message(s) are now one summary; "
                    f"{len(compaction.history) - 1} recent one(s) kept as they were."
                )
        finally:
            self.agents.release(key, ctx)
        await self._answer(event, [inbox_id], text)

    async def _cron(self, event: MessageEvent, inbox_id: int | None, args: str) -> None:
        if self.jobs is None:
            text = "Scheduled jobs are off on this gateway."
        else:
            try:
                text = await self.jobs.command(event, args)
            except StoreError as exc:
                log.error("cron.command_failed", error=str(exc))
                text = "I could not reach my database; please try again shortly."
        await self._answer(event, [inbox_id], text)

    async def _ack(self, event: MessageEvent, text: str) -> None:
        # an acknowledgement settles nothing: the real answer comes with the run
        out = OutboundMessage.to(event, text, "notice", answers=())
        await self.delivery.send(out, [], outcome="ack", event=event)
