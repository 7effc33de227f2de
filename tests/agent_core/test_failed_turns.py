"""A turn that failed leaves the history honest: the user's question stays, an error is never
stored as the assistant's own words, and with no model nothing waits to be sent later."""

from __future__ import annotations

from pathlib import Path

from agent_core import AIAgent, LLMClient, LLMSettings
from tests.fakes.openai import FakeOpenAI, error, text
from tools import ToolRegistry


def _agent(llm: LLMClient) -> AIAgent:
    return AIAgent(llm, ToolRegistry(), system_prompt="SYS", workspace=Path("/tmp"))


def test_a_model_error_keeps_the_question_but_not_the_error(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(error(400, message="context too long"), text("answered now"))
    llm = LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", stream=False, max_retries=0))
    failed = _agent(llm).run_conversation("first question", [])
    assert failed.status == "failed" and "HTTP 400" in failed.text
    assert failed.new_messages == [{"role": "user", "content": "first question"}]
    again = _agent(llm).run_conversation("second", failed.new_messages)
    assert again.status == "done"
    sent = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]
    assert not any("error" in str(m.get("content")) for m in sent)


def test_with_no_model_nothing_is_kept_for_later() -> None:
    llm = LLMClient(LLMSettings("https://api.openai.com/v1", "", "m"))
    assert not llm.configured
    result = _agent(llm).run_conversation("hello?", [])
    assert result.status == "failed" and "No model is configured" in result.text
    assert result.new_messages == []
