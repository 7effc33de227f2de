"""`delegate_task`: hand a sub-problem to a child agent with a fresh context.

The child runs on this same worker thread (a pool worker never waits on another pool task),
sees only the task and context given here and the chosen tools, is interrupted with its parent,
and only its final summary comes back. The agent sets `ToolContext.delegate`; past the depth
limit it is None and the tool says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.host import DelegateRequest
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings


class DelegateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(
        description="The sub-task, stated completely: the sub-agent sees nothing of this "
        "conversation, only this text and 'context'. Say what result to report back.",
        min_length=1,
        max_length=20_000,
    )
    context: str = Field(
        "",
        description="Facts the sub-agent needs (file paths, constraints, what was tried).",
        max_length=50_000,
    )
    tools: list[str] | None = Field(
        None,
        description="Names of the tools the sub-agent may use (a subset of yours). Omit for "
        "all of yours.",
    )


class DelegateTool(ModelTool):
    name = "delegate_task"
    description = (
        "Give a self-contained sub-task to a sub-agent with a fresh context and its own tool "
        "calls; only its final summary comes back to you. Use it for research or multi-step "
        "work whose details you do not need to see."
    )
    parallel_safe = False
    Args = DelegateArgs

    def call(self, args: DelegateArgs, ctx: ToolContext) -> str:
        if ctx.delegate is None:
            raise ToolError(
                f"delegation is not available at this depth ({ctx.depth}); do the task yourself"
            )
        tools = tuple(t.strip() for t in args.tools) if args.tools is not None else None
        return ctx.delegate(DelegateRequest(args.task.strip(), args.context.strip(), tools))


def make_delegate(settings: ToolSettings) -> DelegateTool:
    return DelegateTool()
