"""The tools inside a running gateway: session_search over the store, compaction (automatic,
/compact, and after a restart), memory in the system prompt, per-platform toolsets,
delegate_task on a pool of one worker, and vision on files and Telegram attachments."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.context import SUMMARY_PREFIX
from tests.fakes.openai import FakeOpenAI, Response, last_user_text, text, tool_calls
from tests.fakes.telegram import FakeTelegram
from tests.harness import make_config, running_gateway
from tests.integration.test_telegram import TOKEN
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def observations(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def summarizing(body: dict[str, Any]) -> Response:
    if body["messages"][0]["content"].startswith("You condense"):
        return text("SUMMARY of the early chat")
    return text(f"echo: {last_user_text(body)}")


async def test_session_search_finds_earlier_conversations_of_this_chat_only(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, tools={"enabled": ["session_search"]})
    async with running_gateway(config) as (gw, api):
        await api.chat("the backup runs at 03:00 on Sundays", user="alice")
        await api.chat("our backup bucket is hermes-archive", user="bob")
        await api.chat("/new", user="alice")
        await api.chat("unrelated chatter", user="alice")
        fake_llm.push(tool_calls(("session_search", {"query": "backup sundays"})), text("3am"))
        fake_llm.push(tool_calls(("session_search", {"query": "bucket zebra"})), text("?"))
        fake_llm.push(tool_calls(("session_search", {"query": "!!!"})), text("?"))
        assert (await api.chat("when is the backup?", user="alice"))["text"] == "3am"
        first = observations(fake_llm.requests[-1])
        await api.chat("which bucket?", user="alice")
        second = observations(fake_llm.requests[-1])[-1]
        await api.chat("punctuation?", user="alice")
        third = observations(fake_llm.requests[-1])[-1]
    [hit] = [line for line in first[0].splitlines() if "[backup]" in line.lower()][:1]
    assert "earlier conversation] user: the [backup] runs at 03:00 on [Sundays]" in hit
    assert "hermes-archive" not in first[0]  # bob's session is not alice's
    assert second == "(no past messages match 'bucket zebra')"
    assert third == "(no past messages match '!!!')"


async def test_automatic_compaction_is_persisted_and_reloaded_after_a_restart(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = summarizing
    config = make_config(tmp_path, fake_llm.base_url, model={"context_budget": 150})
    async with running_gateway(config) as (gw, api):
        for i in range(6):
            await api.chat(f"message number {i} " + "x" * 120)
        live = await api.history()
    summaries = [r for r in fake_llm.requests if r["messages"][0]["content"].startswith("You")]
    assert summaries, "the budget never triggered a compaction"
    assert live[0]["content"] == SUMMARY_PREFIX + "SUMMARY of the early chat"
    last = fake_llm.requests[-1]["messages"]
    assert last[0] == fake_llm.requests[0]["messages"][0]  # the system prompt never moved
    assert last[1]["content"].startswith(SUMMARY_PREFIX)
    async with running_gateway(config) as (gw, api):
        reloaded = await api.history()
        fake_llm.reset()
        await api.chat("and now?")
    assert reloaded == live  # the restart sees exactly what the agent saw
    assert fake_llm.requests[-1]["messages"][1]["content"].startswith(SUMMARY_PREFIX)
    with sqlite3.connect(config.home_path / "state.db") as db:
        roles = [r[0] for r in db.execute("SELECT role FROM messages ORDER BY id")]
    assert roles.count("user") >= 7 and "compaction" in roles  # the full log is kept


async def test_compact_command(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = summarizing
    config = make_config(tmp_path, fake_llm.base_url, model={"context_budget": 0})
    async with running_gateway(config) as (gw, api):
        assert (await api.chat("/compact"))["text"] == "Nothing to compact yet."
        for i in range(3):
            await api.chat(f"turn {i}")
        reply = await api.chat("/compact")
        history = await api.history()
    assert reply["text"] == (
        "Compacted: 6 earlier message(s) are now one summary; 0 recent one(s) kept as they were."
    )
    assert history == [{"role": "user", "content": SUMMARY_PREFIX + "SUMMARY of the early chat"}]


async def test_memory_goes_into_the_system_prompt_once_per_session(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    tools = {"enabled": ["memory"]}
    config = make_config(tmp_path, fake_llm.base_url, tools=tools, memory={"scope": "shared"})
    config.home_path.mkdir(parents=True)
    (config.home_path / "MEMORY.md").write_text("User is Ada.\n")
    fake_llm.push(tool_calls(("memory", {"action": "add", "content": "Ada likes tea."})))
    fake_llm.push(text("Noted."))
    async with running_gateway(config) as (gw, api):
        await api.chat("remember that I like tea")
        await api.chat("hello again")
        await api.chat("/new")
        await api.chat("hello after /new")
    prompts = [r["messages"][0]["content"] for r in fake_llm.requests]
    assert "- User is Ada." in prompts[0] and "tea" not in prompts[0]
    assert prompts[0] == prompts[1] == prompts[2]  # stable within the session
    assert "- User is Ada.\n- Ada likes tea." in prompts[3]
    assert (config.home_path / "MEMORY.md").read_text() == "User is Ada.\n§\nAda likes tea.\n"


async def test_per_platform_toolsets_limit_what_the_model_sees(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    tools = {"enabled": ["read_file", "memory"], "platforms": {"api": ["read_file"]}}
    async with running_gateway(make_config(tmp_path, fake_llm.base_url, tools=tools)) as (gw, api):
        await api.chat("hi")
        full, _ = gw.agent_factory.toolset("telegram")
    assert [t["function"]["name"] for t in fake_llm.requests[0]["tools"]] == ["read_file"]
    assert "memory" not in fake_llm.requests[0]["messages"][0]["content"]
    assert full.names == ["read_file", "memory"]


async def test_delegate_task_completes_on_a_pool_of_one_worker(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        runner={"workers": 1},
        tools={"enabled": ["delegate_task", "read_file"], "parallel_workers": 1},
    )
    fake_llm.push(
        tool_calls(
            ("delegate_task", {"task": "count to three"}),
            ("delegate_task", {"task": "count to four"}),
        ),
        text("one two three"),
        text("one two three four"),
        text("Both sub-agents reported."),
    )
    async with running_gateway(config) as (gw, api):
        result = await api.chat("delegate twice")
        after = await api.chat("still alive?")
    assert result["text"] == "Both sub-agents reported."
    assert observations(fake_llm.requests[3]) == ["one two three", "one two three four"]
    assert after["text"] == "echo: still alive?"
    assert gw.pool.snapshot()["busy"] == 0


async def test_vision_on_a_workspace_image(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, tools={"enabled": ["vision_analyze"]})
    config.workspace_path.mkdir(parents=True)
    (config.workspace_path / "dot.png").write_bytes(PNG)
    (config.workspace_path / "fake.png").write_bytes(b"not an image")
    fake_llm.push(
        tool_calls(
            ("vision_analyze", {"path": "dot.png", "question": "What colour?"}),
            ("vision_analyze", {"path": "fake.png"}),
        ),
        text("A single red pixel."),
        text("It is red."),
    )
    async with running_gateway(config) as (gw, api):
        result = await api.chat("look at dot.png")
    vision = next(r for r in fake_llm.requests if isinstance(r["messages"][0]["content"], list))
    parts = vision["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "What colour?"}
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert observations(fake_llm.requests[-1]) == [
        "A single red pixel.",
        "Error: 'fake.png' is not a PNG, JPEG, GIF or WebP image",
    ]
    assert result["text"] == "It is red."


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_vision_on_a_telegram_attachment(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    section = {
        "enabled": True,
        "token": TOKEN,
        "base_url": tg.api_url,
        "base_file_url": tg.file_url,
        "allow_all": True,
    }
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        platforms={"telegram": section},
        tools={"enabled": ["vision_analyze"], "vision": {"model": "vision-model"}},
    )
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1}), ("vision_analyze", {"attachment": 2})),
        text("A tiny red dot."),
        text("Your photo shows a red dot."),
    )
    async with running_gateway(config) as (gw, _):
        tg.send_photo(555, file_bytes=PNG, caption="what is this?")
        [reply] = await tg.wait_sent(1, chat_id=555, timeout=10)
    assert reply["text"] == "Your photo shows a red dot."
    vision = fake_llm.requests[1]
    assert vision["model"] == "vision-model"
    assert vision["messages"][0]["content"][1]["image_url"]["url"].startswith("data:image/png;")
    assert observations(fake_llm.requests[2]) == [
        "A tiny red dot.",
        "Error: the user's message has 1 image(s); no image 2",
    ]
