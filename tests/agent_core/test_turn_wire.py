"""A turn's steps do not copy or encode the conversation again: each message a step adds is
encoded once, and every request of the turn is the same list of encoded messages, grown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agent_core.agent
import agent_core.llm
from agent_core import AIAgent, LLMClient, LLMSettings
from agent_core.history import History, encode
from tests.agent_core.test_agent_tools import Log, NapTool
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tools import ToolRegistry

STEPS = 12


@pytest.mark.parametrize("budget", [0, 10**9], ids=["no-budget", "budget"])
def test_each_message_of_a_turn_is_encoded_once_and_the_requests_share_one_list(
    fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    encoded: list[Any] = []
    prefixes: list[Any] = []

    def counting(value: Any) -> bytes:
        # a message of the turn (not the tools' specs, nor the system prompt, encoded once
        # per agent as its first request goes)
        if isinstance(value, dict) and value.get("role") not in (None, "system"):
            encoded.append(value)
        return encode(value)

    llm = LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", stream=True, max_retries=0))
    complete = llm.complete

    def noting(messages: Any, tools: Any = None, **kw: Any) -> Any:
        prefixes.append(kw["prefix"])
        return complete(messages, tools, **kw)

    monkeypatch.setattr(llm, "complete", noting)
    for n in range(STEPS):
        fake_llm.push(tool_calls(("nap", {"label": str(n)})))
    fake_llm.push(text("done"))
    history = History([{"role": "user", "content": "earlier"}] * 50)
    tools = ToolRegistry([NapTool(Log())])
    agent = AIAgent(llm, tools, system_prompt="SYS", workspace=Path("/tmp"), context_budget=budget)
    monkeypatch.setattr(agent_core.agent, "encode", counting)
    monkeypatch.setattr(agent_core.llm, "encode", counting)
    result = agent.run_conversation("go", history)
    assert result.text == "done" and len(fake_llm.requests) == STEPS + 1
    # the user's message, then each step's call and its result (the final answer is not sent)
    sent = result.new_messages[:-1]
    assert len(sent) == 1 + 2 * STEPS
    assert [id(m) for m in encoded] == [id(m) for m in sent]
    assert all(p is prefixes[0] for p in prefixes)


def test_a_turns_images_go_with_every_request_of_the_turn_and_stay_out_of_its_messages(
    fake_llm: FakeOpenAI,
) -> None:
    fake_llm.push(tool_calls(("nap", {"label": "a"})), text("a dot"))
    llm = LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", stream=True, max_retries=0))
    agent = AIAgent(llm, ToolRegistry([NapTool(Log())]), system_prompt="S", workspace=Path("/tmp"))
    url = "data:image/png;base64,iVBORw0KGgo="
    result = agent.run_conversation("what is it?", [], images=[url])
    assert result.text == "a dot"
    for request in fake_llm.requests:  # the tool step's request sees the image too
        words, image = request["messages"][1]["content"]
        assert words == {"type": "text", "text": "what is it?"}
        assert image == {"type": "image_url", "image_url": {"url": url}}
    assert result.new_messages[0] == {"role": "user", "content": "what is it?"}


@pytest.mark.parametrize(
    "base", ["http://127.0.0.1:8080/v1", "https://api.example.test/openai/v1/", "http://h:1"]
)
def test_the_endpoint_is_the_one_the_sdk_would_join(base: str) -> None:
    """Requests go to an absolute URL built once (`_completions_url`): the same one the SDK
    makes of its base URL and the relative path on every call."""
    sdk = agent_core.llm.sdk_client(base, "key", 5.0)
    try:
        joined = sdk._prepare_url("/chat/completions")
        ours = agent_core.llm._completions_url(sdk.base_url)
        assert str(ours) == str(joined)
        # handed to the SDK as it is: it takes a parsed URL as it takes text
        assert str(sdk._prepare_url(ours)) == str(joined)  # type: ignore[arg-type]
    finally:
        sdk.close()


def test_each_request_of_a_turn_carries_the_registrys_tools(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(tool_calls(("nap", {"label": "one"})))
    fake_llm.push(text("rested"))
    registry = ToolRegistry([NapTool(Log())])
    llm = LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", max_retries=0))
    agent = AIAgent(llm, registry, system_prompt="SYS", workspace=Path("/tmp"))
    assert agent.run_conversation("rest").text == "rested"
    assert len(fake_llm.requests) == 2
    for body in fake_llm.requests:
        assert body["tools"] == registry.specs()
