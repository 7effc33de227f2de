"""`delegate_task` on the agent side: a child `AIAgent` with a fresh context and a subset of
its parent's tools, run inline on the parent's worker thread (a pool worker never waits on
another pool task, so a run pool of one cannot deadlock), interrupted with its parent, and
reporting back only its final text. Depth-limited by `tools.delegate.max_depth`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog

from agent_core.prompt import build_system_prompt
from tools.errors import ToolError
from tools.host import DelegateRequest

if TYPE_CHECKING:
    from agent_core.agent import AIAgent, EventSink
    from agent_core.control import RunControl

log = structlog.get_logger("hermes.agent")
CHILD_PROMPT = (
    "You are a sub-agent. Complete the task below with your tools, then reply with a concise "
    "report of the result: what you found or did, exact values, and anything left undone. "
    "Only that report reaches the agent that asked."
)


def make_child(parent: AIAgent, names: Sequence[str]) -> AIAgent:
    """A sub-agent with a fresh context and the named subset of ``parent``'s tools."""
    from agent_core.agent import AIAgent

    tools = parent.tools.subset(names)
    return AIAgent(
        parent.llm,
        tools,
        system_prompt=build_system_prompt(CHILD_PROMPT, tools.names),
        workspace=parent.workspace,
        session_key=parent.session_key,
        max_iterations=parent.child_iterations,
        max_output_chars=parent.max_output_chars,
        host=parent.host,
        executor=parent.executor,
        context_budget=parent.context_budget,
        depth=parent.depth + 1,
        max_depth=parent.max_depth,
        child_iterations=parent.child_iterations,
    )


def delegate(
    parent: AIAgent,
    request: DelegateRequest,
    control: RunControl,
    on_event: EventSink,
    usage: dict[str, Any],
) -> str:
    """Run the child to its end; its usage is added to ``usage``. `ToolError` for what the
    parent should read as a failed call."""
    names = list(request.tools) if request.tools is not None else parent.tools.names
    unknown = [n for n in names if parent.tools.get(n) is None]
    if unknown:
        raise ToolError(
            f"the sub-agent cannot have {', '.join(map(repr, unknown))}: not among your "
            f"tools ({', '.join(parent.tools.names)})"
        )
    if parent.depth + 1 >= parent.max_depth:
        names = [n for n in names if n != "delegate_task"]
    child = make_child(parent, names)
    task = f"{request.task}\n\nContext:\n{request.context}" if request.context else request.task
    log.info("delegate.start", depth=child.depth, tools=child.tools.names)
    result = child.run_conversation(task, control=control.child(), on_event=on_event)
    for key, value in result.usage.items():
        usage[key] = usage.get(key, 0) + value
    log.info("delegate.end", depth=child.depth, status=result.status)
    if result.status == "interrupted":
        raise ToolError("the sub-agent was interrupted with this turn")
    if result.status == "failed":
        raise ToolError(f"the sub-agent failed: {result.text}")
    if result.status == "max_iterations":
        return f"[the sub-agent ran out of steps]\n{result.text}"
    return result.text or "(the sub-agent returned no report)"
