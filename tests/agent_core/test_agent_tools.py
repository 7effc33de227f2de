"""The agent loop with tools: parallel batches keep the model's order, bad calls become error
observations, delegate_task runs a child with a fresh context, the chosen tools and a depth
limit, and is interrupted with its parent."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from agent_core import AIAgent, LLMClient, LLMSettings, RunControl
from agent_core.delegation import CHILD_PROMPT
from agent_core.parallel import ToolExecutor
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tools import ToolContext, ToolRegistry, default_registry
from tools.registry import ModelTool


class NapArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = Field(description="A label.")
    seconds: float = Field(0.0, description="How long to take.")


class Log:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str, float]] = []

    def add(self, what: str, label: str) -> None:
        with self.lock:
            self.events.append((what, label, time.monotonic()))


class NapTool(ModelTool):
    name: ClassVar[str] = "nap"
    description: ClassVar[str] = "Sleep, then say the label."
    parallel_safe: ClassVar[bool] = True
    Args = NapArgs

    def __init__(self, log: Log) -> None:
        self.log = log

    def call(self, args: NapArgs, ctx: ToolContext) -> str:
        self.log.add("start", args.label)
        time.sleep(args.seconds)
        self.log.add("end", args.label)
        return f"slept {args.label}"


class SoloTool(NapTool):
    name: ClassVar[str] = "solo"
    parallel_safe: ClassVar[bool] = False


@pytest.fixture
def llm(fake_llm: FakeOpenAI) -> LLMClient:
    return LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", stream=True, max_retries=0))


@pytest.fixture
def executor() -> Iterator[ToolExecutor]:
    pool = ToolExecutor(4)
    yield pool
    pool.shutdown()


def agent(
    llm: LLMClient, tools: ToolRegistry, executor: ToolExecutor | None = None, **kw: Any
) -> AIAgent:
    return AIAgent(llm, tools, system_prompt="SYS", workspace=Path("/tmp"), executor=executor, **kw)


def test_parallel_safe_calls_overlap_and_keep_the_model_order(
    fake_llm: FakeOpenAI, llm: LLMClient, executor: ToolExecutor
) -> None:
    log = Log()
    tools = ToolRegistry([NapTool(log), SoloTool(log)])
    fake_llm.push(
        tool_calls(
            ("nap", {"label": "a", "seconds": 0.4}),
            ("nap", {"label": "b", "seconds": 0.1}),
            ("nap", {"label": "c", "seconds": 0.2}),
            ("solo", {"label": "d"}),
            ("nap", {"label": "e"}),
        ),
        text("done"),
    )
    result = agent(llm, tools, executor).run_conversation("go")
    assert result.status == "done"
    observations = [m["content"] for m in result.new_messages if m["role"] == "tool"]
    assert observations == [f"slept {x}" for x in "abcde"]
    ids = [c["id"] for c in result.new_messages[1]["tool_calls"]]
    assert [m["tool_call_id"] for m in result.new_messages if m["role"] == "tool"] == ids
    at = {(what, label): t for what, label, t in log.events}
    assert max(at["start", x] for x in "abc") < min(at["end", x] for x in "abc")  # overlapped
    assert at["start", "d"] >= max(at["end", x] for x in "abc")  # the solo call waited
    assert at["start", "e"] >= at["end", "d"]
    batch = max(at["end", x] for x in "abc") - min(at["start", x] for x in "abc")
    assert batch < 0.4 + 0.1 + 0.2 - 0.1  # less than running them one by one


def test_without_an_executor_the_calls_run_one_by_one(fake_llm: FakeOpenAI, llm: LLMClient) -> None:
    log = Log()
    fake_llm.push(tool_calls(("nap", {"label": "a", "seconds": 0.1}), ("nap", {"label": "b"})))
    fake_llm.push(text("done"))
    agent(llm, ToolRegistry([NapTool(log)])).run_conversation("go")
    assert [(w, label) for w, label, _ in log.events] == [
        ("start", "a"),
        ("end", "a"),
        ("start", "b"),
        ("end", "b"),
    ]


def test_bad_calls_become_observations_and_the_run_goes_on(
    fake_llm: FakeOpenAI, llm: LLMClient, executor: ToolExecutor
) -> None:
    fake_llm.push(
        tool_calls(
            ("no_such_tool", {}),
            ("nap", "{broken json"),
            ("nap", {"label": 5}),
            ("nap", {"label": "ok"}),
        ),
        text("recovered"),
    )
    result = agent(llm, ToolRegistry([NapTool(Log())]), executor).run_conversation("go")
    got = [m["content"] for m in result.new_messages if m["role"] == "tool"]
    assert got[0] == "Error: unknown tool 'no_such_tool'. Available tools: nap."
    assert got[1].startswith("Error: arguments for nap are not valid JSON")
    assert got[2] == "Error: invalid arguments for nap: label: Input should be a valid string"
    assert got[3] == "slept ok"
    assert result.text == "recovered"


def test_executor_runs_nested_batches_inline_and_survives_shutdown() -> None:
    pool = ToolExecutor(2)
    inner: list[list[int]] = []

    def nested() -> int:
        inner.append(pool.map([lambda: 1, lambda: 2]))  # from a pool thread: no waiting on it
        return 0

    assert pool.map([nested, nested, nested]) == [0, 0, 0]
    assert inner == [[1, 2]] * 3
    pool.shutdown()
    assert pool.map([lambda: 3, lambda: 4]) == [3, 4]


class TestDelegate:
    def test_child_gets_a_fresh_context_and_only_the_chosen_tools(
        self, fake_llm: FakeOpenAI, llm: LLMClient, tmp_path: Path
    ) -> None:
        (tmp_path / "notes.txt").write_text("the answer is 42\n")
        tools = default_registry(["read_file", "delegate_task"])
        fake_llm.push(
            tool_calls(
                (
                    "delegate_task",
                    {"task": "Find the answer", "context": "see notes.txt", "tools": ["read_file"]},
                )
            ),
            tool_calls(("read_file", {"path": "notes.txt"})),  # the child works
            text("The answer is 42."),  # the child's report
            text("It is 42."),
        )
        parent = AIAgent(llm, tools, system_prompt="SYS", workspace=tmp_path)
        result = parent.run_conversation(
            "what is the answer?", [{"role": "user", "content": "old turn"}]
        )
        assert result.text == "It is 42."
        first_child = fake_llm.requests[1]
        assert first_child["messages"][0]["content"].startswith(CHILD_PROMPT)
        assert first_child["messages"][1:] == [
            {"role": "user", "content": "Find the answer\n\nContext:\nsee notes.txt"}
        ]
        assert [t["function"]["name"] for t in first_child["tools"]] == ["read_file"]
        observation = result.new_messages[2]
        assert observation["role"] == "tool" and observation["content"] == "The answer is 42."
        # only the summary came back: the child's own tool calls are not in the parent's turn
        assert len(result.new_messages) == 4
        assert result.usage["prompt_tokens"] > 0

    def test_depth_limit_and_unknown_tools(
        self, fake_llm: FakeOpenAI, llm: LLMClient, tmp_path: Path
    ) -> None:
        tools = default_registry(["read_file", "delegate_task"])
        fake_llm.push(
            tool_calls(("delegate_task", {"task": "t", "tools": ["terminal"]})),
            tool_calls(("delegate_task", {"task": "go deeper"})),
            tool_calls(("delegate_task", {"task": "deeper still"})),  # the child tries
            text("child could not delegate"),
            text("ok"),
        )
        parent = AIAgent(llm, tools, system_prompt="SYS", workspace=tmp_path, max_depth=1)
        result = parent.run_conversation("delegate")
        observations = [m["content"] for m in result.new_messages if m["role"] == "tool"]
        assert observations[0].startswith("Error: the sub-agent cannot have 'terminal'")
        assert observations[1] == "child could not delegate"
        child_request = fake_llm.requests[2]
        assert [t["function"]["name"] for t in child_request["tools"]] == ["read_file"]
        child_result = fake_llm.requests[3]["messages"][-1]["content"]
        assert child_result.startswith("Error: unknown tool 'delegate_task'")

    def test_interrupting_the_parent_interrupts_the_child(
        self, fake_llm: FakeOpenAI, llm: LLMClient, tmp_path: Path
    ) -> None:
        tools = default_registry(["delegate_task"])
        slow = text("x" * 200, chunk_size=1, chunk_delay=0.05)  # the child streams slowly
        fake_llm.push(tool_calls(("delegate_task", {"task": "slow"})), slow)
        control = RunControl()
        parent = AIAgent(llm, tools, system_prompt="SYS", workspace=tmp_path)
        out: list[Any] = []
        worker = threading.Thread(
            target=lambda: out.append(parent.run_conversation("go", control=control))
        )
        worker.start()
        deadline = time.monotonic() + 5
        while len(fake_llm.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        started = time.monotonic()
        control.interrupt()
        worker.join(5)
        assert not worker.is_alive() and time.monotonic() - started < 3
        result = out[0]
        assert result.status == "interrupted"
        observation = next(m for m in result.new_messages if m["role"] == "tool")["content"]
        assert observation == "Error: the sub-agent was interrupted with this turn"

    def test_a_child_control_follows_its_parent(self) -> None:
        parent = RunControl()
        child = parent.child()
        assert not child.interrupted and child.wait(0.01) is False
        threading.Timer(0.05, parent.interrupt).start()
        assert child.wait(5) is True and child.interrupted
        child.steer("only mine")
        assert parent.take_steers() == [] and child.take_steers() == ["only mine"]
