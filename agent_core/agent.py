"""`AIAgent`: the synchronous ReAct loop (model -> tool calls -> observations -> model ...).

It runs on a gateway worker thread; `agent_core.control.RunControl` is how the gateway reaches
into a running loop from the event-loop thread (interrupt, deadline, steer: thread-safe).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog

from agent_core import context as budget
from agent_core import delegation
from agent_core.control import RunControl
from agent_core.history import INTERRUPTED_RESULT, History, encode, synthetic_results
from agent_core.llm import Completion, LLMClient, ModelError, ToolCall
from agent_core.parallel import ToolExecutor
from tools.host import DelegateRequest, ToolHost
from tools.registry import ToolContext, ToolOutcome, ToolRegistry

Message = dict[str, Any]
RunStatus = Literal["done", "interrupted", "failed", "max_iterations"]
EventSink = Callable[[str, dict[str, Any]], None]

log = structlog.get_logger("hermes.agent")
NOT_CONFIGURED = (
    "No model is configured. Set model.api_key in config.yaml (or the OPENAI_API_KEY "
    "environment variable), or point model.base_url at a local OpenAI-compatible server."
)
INTERRUPTED_MARK = "[interrupted]"


@dataclass(slots=True)
class RunResult:
    """The outcome of one turn; `new_messages` are appended to the session history as-is."""

    status: RunStatus
    text: str
    new_messages: list[Message]
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    unused_steers: list[str] = field(default_factory=list)
    steered: int = 0
    # set when older turns were summarized: the session's history becomes this, then
    # `new_messages` are appended to it (the store records `compaction.marker` first)
    compaction: budget.Compaction | None = None


class AIAgent:
    """One session's agent: a stable system prompt, the shared LLM client and tool registry."""

    def __init__(
        self,
        llm: LLMClient,
        tools: ToolRegistry,
        *,
        system_prompt: str,
        workspace: Path,
        session_key: str = "",
        max_iterations: int = 20,
        max_output_chars: int = 50_000,
        host: ToolHost | None = None,
        executor: ToolExecutor | None = None,
        context_budget: int = 0,
        memory: Callable[[], str] | None = None,
        depth: int = 0,
        max_depth: int = 1,
        child_iterations: int = 10,
    ) -> None:
        self.llm = llm
        self.tools = tools
        self.system_prompt = system_prompt
        self.workspace = workspace
        self.session_key = session_key
        self.max_iterations = max_iterations
        self.max_output_chars = max_output_chars
        self.host = host or ToolHost()
        self.executor = executor
        self.context_budget = context_budget  # tokens; 0 = never compact on its own
        self.depth = depth
        self.max_depth = max_depth  # delegate_task is offered while depth < max_depth
        self.child_iterations = child_iterations
        self._memory = memory
        self._system_json: bytes | None = None
        self._control: RunControl | None = None

    @property
    def system_json(self) -> bytes:
        """The system message, built on first use and then fixed for this agent's life: the
        memory snapshot is read once (on the worker thread), so the prefix stays stable."""
        if self._system_json is None:
            extra = self._memory() if self._memory is not None else ""
            if extra:
                self.system_prompt = f"{self.system_prompt}\n\n{extra}"
            self._system_json = encode({"role": "system", "content": self.system_prompt})
        return self._system_json

    def compact(
        self, history: History, control: RunControl | None = None, *, keep_tokens: int = -1
    ) -> budget.Compaction | None:
        """Fold the older turns of ``history`` into a summary (blocking; a model call).
        ``keep_tokens`` of recent turns stay as they are (default: a quarter of the budget)."""
        control = control or RunControl()
        keep = keep_tokens if keep_tokens >= 0 else self.context_budget // 4
        return budget.compact(
            history, self.llm, keep_tokens=keep, should_stop=lambda: control.interrupted
        )

    def interrupt(self) -> None:
        control = self._control
        if control is not None:
            control.interrupt()

    def steer(self, text: str) -> None:
        control = self._control
        if control is not None:
            control.steer(text)

    def run_conversation(
        self,
        text: str,
        history: Sequence[Message] | History = (),
        *,
        control: RunControl | None = None,
        on_delta: Callable[[str], None] | None = None,
        on_event: EventSink | None = None,
        images: Sequence[str] = (),
    ) -> RunResult:
        """Run one turn to a final answer, an interrupt, a failure or `max_iterations`.

        ``history`` may be a plain message list (repaired and encoded for this call) or a
        `History`, whose messages are valid and encoded already. ``images``: data URLs the
        model sees with ``text`` this turn (the history keeps the text alone).
        """
        control = control or RunControl()
        self._control = control
        try:
            return _Turn(self, control, on_delta, on_event).run(text, history, images)
        finally:
            self._control = None


class _Turn:
    """The state of one `run_conversation` call."""

    def __init__(
        self,
        agent: AIAgent,
        control: RunControl,
        on_delta: Callable[[str], None] | None,
        on_event: EventSink | None,
    ) -> None:
        self.agent = agent
        self.control = control
        self.on_delta = on_delta
        self.on_event = on_event or (lambda kind, data: None)
        self.new: list[Message] = []
        self.usage: dict[str, int] = {}
        self.steered = 0
        self.compaction: budget.Compaction | None = None
        self._compaction_tried = False
        # the next request's messages, encoded: the system prompt and the history (encoded
        # once, in `History`), then each of `new` encoded once as it is added (`_encoded`).
        # One list for the turn: a step neither copies the history nor encodes it again.
        self._wire: list[bytes] = []
        self._prefix = 0  # how many of `_wire` are the system prompt and the history
        self._sent = 0  # how many of `new` are in `_wire`
        can_delegate = agent.depth < agent.max_depth and "delegate_task" in agent.tools.names
        self.ctx = ToolContext(
            workspace=agent.workspace,
            session_key=agent.session_key,
            max_output_chars=agent.max_output_chars,
            should_stop=lambda: control.interrupted,
            host=agent.host,
            delegate=self._delegate if can_delegate else None,
            depth=agent.depth,
        )

    def run(
        self, text: str, history: Sequence[Message] | History, images: Sequence[str] = ()
    ) -> RunResult:
        self.new.append({"role": "user", "content": text})
        if not self.agent.llm.configured:
            # nothing was asked: the prompt must not wait in the history for a model to come
            self.new = []
            hint = self.agent.llm.settings.setup_hint or NOT_CONFIGURED
            return self._finish("failed", hint, error="model not configured")
        self.history = history if isinstance(history, History) else History(history)
        self._wire = [self.agent.system_json, *self.history.encoded]
        self._prefix = len(self._wire)
        if images:  # sent with its images, stored without them: base64 would swell the history
            self._wire.append(encode(with_images(text, images)))
            self._sent = 1
        tool_specs = self.agent.tools.specs_json() if self.agent.tools.names else None
        for _ in range(self.agent.max_iterations):
            self._take_steers()
            if self.control.interrupted:
                return self._interrupted("")
            self._within_budget(tool_specs)
            if self.control.interrupted:
                return self._interrupted("")
            started = time.monotonic()
            tries = _Retries(self.control.wait)
            try:
                completion = self.agent.llm.complete(
                    [],
                    tool_specs,
                    prefix=self._encoded(),
                    should_stop=lambda: self.control.interrupted,
                    on_delta=self.on_delta,
                    wait=tries.wait,
                    on_stop=self.control.on_interrupt,
                )
            except ModelError as exc:
                failure = {"status": exc.status, "error_class": exc.kind, "retries": tries.count}
                self._model_call(started, "error", failure)
                # the user's message stays (the next turn sees what was asked); the error text
                # does not: stored as the assistant's words, the model would read it as its own
                return self._finish("failed", exc.user_message, error=str(exc))
            outcome = "interrupted" if completion.interrupted else "ok"
            finish = {"finish_reason": completion.finish_reason, "retries": tries.count}
            if completion.first_token_at is not None:  # streamed: its time to first token
                finish["ttft_ms"] = round((completion.first_token_at - started) * 1000)
            self._model_call(started, outcome, {**completion.usage, **finish})
            self._add_usage(completion)
            if completion.interrupted:
                return self._interrupted(completion.content)
            if not completion.tool_calls:
                self.new.append({"role": "assistant", "content": completion.content})
                return self._finish("done", completion.content)
            self._record_calls(completion)
            if not self._run_tools(completion.tool_calls):
                return self._interrupted("")
        note = (
            f"I stopped after {self.agent.max_iterations} steps without a final answer. "
            "Tell me how to continue."
        )
        self.new.append({"role": "assistant", "content": note})
        return self._finish("max_iterations", note)

    def _encoded(self) -> list[bytes]:
        """The next request's messages, encoded: the messages added to `new` since the last
        call are encoded now, once, and appended."""
        for message in self.new[self._sent :]:
            self._wire.append(encode(message))
        self._sent = len(self.new)
        return self._wire

    def _within_budget(self, tool_specs: bytes | None) -> None:
        """Compact the history once per turn when the request would pass `context_budget`
        (the system message stays as it was)."""
        limit = self.agent.context_budget
        if limit <= 0 or self._compaction_tried:
            return
        parts: Iterable[bytes] = self._encoded()
        if tool_specs:
            parts = itertools.chain(parts, [tool_specs])
        estimate = budget.estimate_tokens(parts)
        if estimate <= limit:
            return
        self._compaction_tried = True
        try:
            compaction = self.agent.compact(self.history, self.control)
        except ModelError as exc:
            log.warning("context.compaction_failed", error=str(exc), tokens=estimate)
            return
        if compaction is None:
            return
        self.compaction = compaction
        log.info(
            "context.compacted",
            tokens_before=estimate,
            summarized=compaction.summarized,
            kept=len(compaction.history) - 1,
        )
        added = self._wire[self._prefix :]
        self._wire = [self.agent.system_json, *compaction.history.encoded, *added]
        self._prefix = len(self._wire) - len(added)

    def _delegate(self, request: DelegateRequest) -> str:
        """Run a child agent inline on this thread; its summary is the observation."""
        return delegation.delegate(self.agent, request, self.control, self.on_event, self.usage)

    def _take_steers(self) -> None:
        for steer in self.control.take_steers():
            self.steered += 1
            self.new.append({"role": "user", "content": steer})

    def _model_call(self, started: float, outcome: str, data: Mapping[str, Any]) -> None:
        """Tell the host about one model request (its metrics), from this thread."""
        seconds = time.monotonic() - started
        model = self.agent.llm.settings.model
        self.on_event(
            "model_call", {"seconds": seconds, "outcome": outcome, "model": model, **data}
        )

    def _add_usage(self, completion: Completion) -> None:
        for key, value in completion.usage.items():
            self.usage[key] = self.usage.get(key, 0) + value

    def _record_calls(self, completion: Completion) -> None:
        self.new.append(
            {
                "role": "assistant",
                "content": completion.content or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in completion.tool_calls
                ],
            }
        )

    def _run_tools(self, calls: list[ToolCall]) -> bool:
        """Run calls in batches: consecutive parallel-safe calls at once, the others alone.
        Observations go in the model's order; on interrupt the rest get a synthetic result."""
        tools = self.agent.tools
        i = 0
        while i < len(calls):
            if self.control.interrupted:
                self.new.extend(synthetic_results([c.id for c in calls[i:]], INTERRUPTED_RESULT))
                return False
            j = i + 1
            if tools.is_parallel_safe(calls[i].name):
                while j < len(calls) and tools.is_parallel_safe(calls[j].name):
                    j += 1
            batch = calls[i:j]
            jobs = [functools.partial(self._call_tool, call) for call in batch]
            executor = self.agent.executor
            outcomes = executor.map(jobs) if executor is not None else [job() for job in jobs]
            for call, outcome in zip(batch, outcomes, strict=True):
                self.new.append(
                    {"role": "tool", "tool_call_id": call.id, "content": outcome.content}
                )
            i = j
        return True

    def _call_tool(self, call: ToolCall) -> ToolOutcome:
        if self.control.interrupted:  # a batch's later calls, stopped meanwhile: not begun
            return ToolOutcome(INTERRUPTED_RESULT, ok=False)
        self.on_event("tool_start", {"tool": call.name, "call_id": call.id})
        outcome = self.agent.tools.dispatch(call.name, call.arguments, self.ctx)
        seconds = round(outcome.duration_s, 4)
        if outcome.ok:
            log.info("tool.call", tool=call.name, ok=True, seconds=seconds)
        else:  # what the model was told, so the operator need not guess
            log.info(
                "tool.call", tool=call.name, ok=False, seconds=seconds, error=outcome.content[:300]
            )
        self.on_event(
            "tool_end",
            {
                "tool": call.name,
                "call_id": call.id,
                "ok": outcome.ok,
                "duration_s": round(outcome.duration_s, 4),
                "bytes_out": len(outcome.content.encode()),  # its size only: never its text
            },
        )
        return outcome

    def _interrupted(self, partial: str) -> RunResult:
        content = f"{partial}\n\n{INTERRUPTED_MARK}" if partial else INTERRUPTED_MARK
        self.new.append({"role": "assistant", "content": content})
        return self._finish("interrupted", partial)

    def _finish(self, status: RunStatus, text: str, error: str | None = None) -> RunResult:
        return RunResult(
            status=status,
            text=text,
            new_messages=self.new,
            usage=self.usage,
            error=error,
            unused_steers=self.control.take_steers(),
            steered=self.steered,
            compaction=self.compaction,
        )


def with_images(text: str, images: Sequence[str]) -> Message:
    """A user message of a text part and an `image_url` part per data URL."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in images]
    return {"role": "user", "content": parts}


class _Retries:
    """The run's ``wait`` between a model call's attempts, counting them: the call's retries
    (reported with the call, for its span)."""

    __slots__ = ("count", "waiter")

    def __init__(self, waiter: Callable[[float], bool]) -> None:
        self.waiter = waiter
        self.count = 0

    def wait(self, seconds: float) -> bool:
        self.count += 1
        return self.waiter(seconds)
