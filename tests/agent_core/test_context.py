"""The context budget: estimates, the split point, compaction keeping tool-call pairs valid,
the stable system prompt, and restoring a compacted log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core import AIAgent, LLMClient, LLMSettings
from agent_core.context import (
    COMPACTION_ROLE,
    SUMMARY_PREFIX,
    Compaction,
    compact,
    estimate_tokens,
    restore,
    split_point,
    transcript,
)
from agent_core.history import History, repair
from tests.fakes.openai import FakeOpenAI, Response, last_user_text, text
from tools import ToolRegistry

Message = dict[str, Any]


def turn(i: int, tools: int = 0, size: int = 40) -> list[Message]:
    """One user turn: the question, ``tools`` tool calls with results, the answer."""
    out: list[Message] = [{"role": "user", "content": f"question {i} " + "q" * size}]
    if tools:
        ids = [f"c{i}_{k}" for k in range(tools)]
        out.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": c, "type": "function", "function": {"name": "t", "arguments": "{}"}}
                    for c in ids
                ],
            }
        )
        out.extend({"role": "tool", "tool_call_id": c, "content": "r" * size} for c in ids)
    out.append({"role": "assistant", "content": f"answer {i} " + "a" * size})
    return out


def valid(messages: list[Message]) -> bool:
    """Every tool call answered right after its assistant message, and no orphan result."""
    return repair(messages) == messages and (not messages or messages[0].get("role") != "tool")


class StubLLM:
    """Stands in for `LLMClient` in unit tests: answers every call with a fixed summary."""

    configured = True

    def __init__(self) -> None:
        self.requests: list[list[Message]] = []

    def complete(self, messages: list[Message], tools: Any, **kw: Any) -> Any:
        from agent_core.llm import Completion

        self.requests.append(messages)
        return Completion(content="the gist", finish_reason="stop")


def test_estimate_is_bytes_over_four_plus_framing() -> None:
    assert estimate_tokens([b"x" * 400, b"y" * 40]) == 100 + 10 + 2 * 4
    assert estimate_tokens([]) == 0


def test_split_point_keeps_recent_turns_from_a_user_message() -> None:
    history = History([m for i in range(6) for m in turn(i, tools=2)])
    cut = split_point(history, keep_tokens=400)
    assert 0 < cut < len(history)
    assert history.messages[cut]["role"] == "user"
    assert split_point(history, keep_tokens=0) == len(history)  # everything is folded
    assert split_point(history, keep_tokens=10**9) == 5  # at least the first turn goes
    assert split_point(History([]), 100) == 0


def test_nothing_to_fold_when_only_a_summary_precedes_the_kept_turn() -> None:
    summary = {"role": "user", "content": SUMMARY_PREFIX + "earlier"}
    history = History([summary, *turn(1)])
    assert split_point(history, keep_tokens=10**6) == 0


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    sizes=st.lists(st.integers(1, 400), min_size=12, max_size=12),
    keep=st.integers(0, 3000),
    summarized_before=st.booleans(),
)
def test_compaction_always_keeps_tool_call_pairs_valid(
    shape: list[int], sizes: list[int], keep: int, summarized_before: bool
) -> None:
    messages = [m for i, n in enumerate(shape) for m in turn(i, tools=n, size=sizes[i])]
    if summarized_before:
        messages.insert(0, {"role": "user", "content": SUMMARY_PREFIX + "older"})
    history = History(messages)
    llm = StubLLM()
    result = compact(history, llm, keep_tokens=keep)  # type: ignore[arg-type]
    if result is None:
        assert split_point(history, keep) == 0
        return
    new = result.history.messages
    assert valid(new)
    assert new[0] == {"role": "user", "content": SUMMARY_PREFIX + "the gist"}
    assert new[1:] == messages[result.summarized :]  # the kept tail is untouched
    assert len(new) - 1 <= len(messages)
    if len(new) > 1:
        assert new[1]["role"] == "user"
    # the summarizer saw the folded part, the earlier summary included
    sent = llm.requests[0][1]["content"]
    assert ("EARLIER SUMMARY: older" in sent) == summarized_before
    assert restore([*messages, result.marker]) == new


def test_transcript_drops_the_middle_but_keeps_an_earlier_summary() -> None:
    messages = [{"role": "user", "content": SUMMARY_PREFIX + "S"}]
    messages += [m for i in range(50) for m in turn(i, tools=1)]
    text_ = transcript(messages, max_chars=2000)
    assert text_.startswith("EARLIER SUMMARY: S\n[... ")
    assert "earlier messages omitted" in text_
    assert text_.rstrip().endswith("ASSISTANT: answer 49 " + "a" * 40)
    assert len(text_) <= 2100


def test_restore_uses_the_last_marker_and_survives_a_broken_one() -> None:
    a, b, c = turn(1), turn(2), turn(3)
    first = Compaction(History([{"role": "user", "content": SUMMARY_PREFIX + "one"}]), 4)
    second = Compaction(History([{"role": "user", "content": SUMMARY_PREFIX + "two"}, *b]), 3)
    log = [*a, first.marker, *b, second.marker, *c]
    assert restore(log) == [*second.history.messages, *c]
    broken = [*a, {"role": COMPACTION_ROLE, "content": "{not json"}, *b]
    assert restore(broken) == [*a, *b]
    assert restore(a) == a


def _agent(llm: LLMClient, budget: int) -> AIAgent:
    return AIAgent(
        llm, ToolRegistry(), system_prompt="SYS", workspace=Path("/tmp"), context_budget=budget
    )


def test_the_agent_compacts_over_budget_and_keeps_the_system_prefix(
    fake_llm: FakeOpenAI,
) -> None:
    def responder(body: dict[str, Any]) -> Response:
        first = body["messages"][0]["content"]
        if first.startswith("You condense"):
            return text("SUMMARY: questions 0..4 were asked")
        return text(f"echo: {last_user_text(body)}")

    fake_llm.responder = responder
    llm = LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", stream=False))
    history = History([m for i in range(8) for m in turn(i, tools=1, size=200)])
    small = _agent(llm, budget=500).run_conversation("next?", history)
    assert small.status == "done" and small.compaction is not None
    summarize, answer = fake_llm.requests
    assert "USER: question 0" in summarize["messages"][1]["content"]
    sent = answer["messages"]
    assert sent[0] == {"role": "system", "content": "SYS"}  # the prefix did not move
    assert sent[1]["content"].startswith(SUMMARY_PREFIX + "SUMMARY: questions 0..4")
    assert sent[2]["role"] == "user" and sent[-1] == {"role": "user", "content": "next?"}
    assert valid(sent[1:])
    assert len(sent) < len(history) + 2
    stored = json.loads(small.compaction.marker["content"])
    assert stored == small.compaction.history.messages

    fake_llm.reset()
    roomy = _agent(llm, budget=10**6).run_conversation("next?", history)
    assert roomy.compaction is None and len(fake_llm.requests) == 1
    off = _agent(llm, budget=0).run_conversation("next?", history)
    assert off.compaction is None


def test_a_failing_summary_leaves_the_history_alone(fake_llm: FakeOpenAI) -> None:
    from tests.fakes.openai import error

    fake_llm.push(error(400, message="too long"), text("fine"))
    llm = LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", stream=False, max_retries=0))
    history = History([m for i in range(4) for m in turn(i, size=300)])
    result = _agent(llm, budget=100).run_conversation("go", history)
    assert (result.status, result.text, result.compaction) == ("done", "fine", None)
    assert len(fake_llm.requests[1]["messages"]) == len(history) + 2
