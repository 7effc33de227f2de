"""`Run`: one agent run and the messages it answers, plus the texts users see about them."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field, replace

from agent_core import RunControl, RunResult
from hermes_gateway.events import MessageEvent
from hermes_gateway.sessions import Pending

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


@dataclass(eq=False)
class Run:
    """One agent run answering ``items`` (several when messages were merged)."""

    key: str
    items: list[Pending]
    carried: list[Pending] = field(default_factory=list)  # interrupted earlier, answered here
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    control: RunControl = field(default_factory=RunControl)
    started: float = field(default_factory=time.monotonic)
    steered: list[Pending] = field(default_factory=list)
    future: asyncio.Future[RunResult] | None = None
    abandon: asyncio.Future[str] | None = None
    task: asyncio.Task[None] | None = None
    stopped: bool = False  # abandoned: its late result is discarded, never delivered
    shutdown: bool = False  # interrupted by SIGTERM: leave it in the inbox for the next start
    grace_timer: asyncio.TimerHandle | None = None
    carry_forward: list[Pending] = field(default_factory=list)
    recorded: bool = False  # abandon() wrote the stopped turn to the history
    persist_task: asyncio.Task[None] | None = None

    @property
    def primary(self) -> MessageEvent:
        return self.items[-1].event


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
