"""The long-term archive: `hindsight_retain`, `hindsight_recall`, `hindsight_reflect` and
`hindsight_forget`.

No size limit and never injected whole: the model stores facts and queries them by meaning and
keywords. The archive lives in the gateway's store, reached through the host's callables, and
each user has their own bank (or one shared bank, by configuration).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tools.errors import ToolError
from tools.host import ForgetRequest, Forgotten, Memory
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings

UNAVAILABLE = "the long-term archive is not available here"


class RetainArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(
        description="What to remember: a fact, decision or preference, stated so it makes "
        "sense on its own later (names, dates, the why).",
        min_length=1,
        max_length=20_000,
    )
    context: str = Field(
        "",
        max_length=2000,
        description="Optional: the situation it came from, e.g. 'planning the Q3 migration'.",
    )
    tags: list[str] = Field(
        default_factory=list, max_length=16, description="Optional short labels, e.g. ['infra']."
    )


class RecallArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        description="What you are looking for, in words: it is matched by meaning and by "
        "keywords, e.g. 'which database did we choose for billing and why'.",
        min_length=1,
        max_length=1000,
    )
    limit: int = Field(8, ge=1, le=50, description="Most memories to return.")


class ReflectArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        description="A question to answer from the archive, e.g. 'what did we decide about "
        "backups, and when?'",
        min_length=1,
        max_length=1000,
    )


class ForgetArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[int] = Field(
        default_factory=list,
        max_length=100,
        description="The memories to delete, by the ids recall shows as [m<id>] (12 or 'm12').",
    )
    query: str = Field(
        "",
        max_length=1000,
        description="Instead of ids: what to forget, in words. The first call only lists the "
        "matching memories and deletes nothing.",
    )
    confirm: bool = Field(
        False,
        description="With the same query, after it listed the memories: delete exactly those.",
    )
    limit: int = Field(10, ge=1, le=50, description="Most memories a query lists.")

    @field_validator("ids", mode="before")
    @classmethod
    def _marks(cls, value: object) -> object:
        """Recall shows ids as [m12]: the model may pass them so."""
        if isinstance(value, list):
            return [v[1:] if isinstance(v, str) and v[:1] in "mM" and v[1:] else v for v in value]
        return value

    @model_validator(mode="after")
    def _one_way(self) -> ForgetArgs:
        self.query = self.query.strip()
        if bool(self.ids) == bool(self.query):
            raise ValueError("give either ids or a query (not both, not neither)")
        if self.confirm and not self.query:
            raise ValueError("confirm goes with a query; ids are deleted without it")
        return self


class RetainTool(ModelTool):
    name = "hindsight_retain"
    description = (
        "Store something in your long-term archive (no size limit; not shown to you unless you "
        "recall it). Use it for decisions, facts and preferences worth finding months later."
    )
    parallel_safe = False  # a write: in the model's order
    Args = RetainArgs

    def call(self, args: RetainArgs, ctx: ToolContext) -> str:
        retain = ctx.host.retain
        if retain is None or not ctx.session_key:
            raise ToolError(UNAVAILABLE)
        tags = tuple(t.strip()[:64] for t in args.tags if t.strip())
        return retain(ctx.session_key, args.content.strip(), args.context.strip(), tags)


class RecallTool(ModelTool):
    name = "hindsight_recall"
    description = (
        "Search your long-term archive by meaning and keywords; returns the best memories with "
        "when and where they were stored. Before citing a past decision, recall it here rather "
        "than trusting a summary."
    )
    parallel_safe = True
    Args = RecallArgs

    def call(self, args: RecallArgs, ctx: ToolContext) -> str:
        recall = ctx.host.recall
        if recall is None or not ctx.session_key:
            raise ToolError(UNAVAILABLE)
        found = recall(ctx.session_key, args.query.strip(), args.limit)
        lines = [render(m) for m in found.memories]
        if not lines:
            lines = [f"(no memory matches {args.query.strip()!r})"]
        if found.note:
            lines.append(f"[{found.note}]")
        return "\n".join(lines)


class ReflectTool(ModelTool):
    name = "hindsight_reflect"
    description = (
        "Answer a question from your long-term archive: recalls the relevant memories and "
        "reasons over them, citing the ones used as [m<id>]."
    )
    parallel_safe = True
    Args = ReflectArgs

    def call(self, args: ReflectArgs, ctx: ToolContext) -> str:
        reflect = ctx.host.reflect
        if reflect is None or not ctx.session_key:
            raise ToolError(UNAVAILABLE)
        return reflect(ctx.session_key, args.query.strip(), ctx.should_stop)


class ForgetTool(ModelTool):
    name = "hindsight_forget"
    description = (
        "Delete memories from your long-term archive (only the user's own), when they ask you "
        "to forget something or a memory is wrong. With a query, the first call lists what "
        "matches and deletes nothing; then call with their ids (or the same query and "
        "confirm: true) to delete. Deleted memories cannot be recovered."
    )
    parallel_safe = False  # a write: in the model's order
    Args = ForgetArgs

    def call(self, args: ForgetArgs, ctx: ToolContext) -> str:
        forget = ctx.host.forget
        if forget is None or not ctx.session_key:
            raise ToolError(UNAVAILABLE)
        ask = ForgetRequest(tuple(dict.fromkeys(args.ids)), args.query, args.confirm, args.limit)
        done = forget(ctx.session_key, ask)
        lines = _forget_lines(args, done)
        if done.note:
            lines.append(f"[{done.note}]")
        return "\n".join(lines)


def _forget_lines(args: ForgetArgs, done: Forgotten) -> list[str]:
    if args.query and not args.confirm:
        if not done.matched:
            return [f"(no memory matches {args.query!r}; nothing deleted)"]
        ids = ", ".join(str(m.id) for m in done.matched)
        return [
            f"Nothing deleted yet. {len(done.matched)} memories match {args.query!r}:",
            *(render(m) for m in done.matched),
            f"To delete them all: the same query with confirm: true. To delete some: their "
            f"ids (of these: {ids}).",
        ]
    lines = []
    if done.forgotten:
        lines.append("Forgotten: " + ", ".join(f"m{i}" for i in done.forgotten) + ".")
    if done.missing:
        lines.append("Not in your archive: " + ", ".join(f"m{i}" for i in done.missing) + ".")
    return lines or ["Nothing to delete: the memories it listed are already gone."]


def render(memory: Memory) -> str:
    """``[m12] 2026-03-01 14:02 UTC (telegram:dm:42, message 7) text  {context} #tags``"""
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(memory.when))
    source = memory.session_key or "no session"
    if memory.message_id:
        source += f", message {memory.message_id}"
    line = f"[m{memory.id}] {when} UTC ({source}) {memory.content}"
    if memory.context:
        line += f"  {{context: {memory.context}}}"
    if memory.tags:
        line += "  " + " ".join(f"#{t}" for t in memory.tags)
    return line


def make_retain(settings: ToolSettings) -> RetainTool:
    return RetainTool()


def make_recall(settings: ToolSettings) -> RecallTool:
    return RecallTool()


def make_reflect(settings: ToolSettings) -> ReflectTool:
    return ReflectTool()


def make_forget(settings: ToolSettings) -> ForgetTool:
    return ForgetTool()
