"""Per-user memory on every Telegram session shape (DM, group session per user, a shared topic
thread): what one user stores (MEMORY.md, the archive, their messages) never reaches another
user's system prompt, recall or session_search; the shared scope keeps one file for all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from hermes_gateway.config import Config
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.telegram import FakeTelegram
from tests.harness import make_config, running_gateway
from tests.integration.test_telegram import TOKEN
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
TOOLS = ["memory", "session_search", "hindsight_retain", "hindsight_recall"]
SECRET = "4321"
# shape -> (chat of user 1, chat of user 2, how their messages are sent)
SHAPES: dict[str, tuple[int, int, dict[str, Any]]] = {
    "dm": (1, 2, {}),
    "group": (-100, -100, {"chat_type": "supergroup"}),
    "thread": (-100, -100, {"chat_type": "supergroup", "thread_id": 7}),
}


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def tg_config(tmp_path: Path, llm: FakeOpenAI, fake: FakeTelegram, **memory: Any) -> Config:
    section = {
        "enabled": True,
        "token": TOKEN,
        "base_url": fake.api_url,
        "base_file_url": fake.file_url,
        "allow_all": True,
    }
    tools = {"enabled": TOOLS}
    return make_config(
        tmp_path, llm.base_url, platforms={"telegram": section}, tools=tools, memory=memory
    )


class Chats:
    """Sends as user 1 or 2 in one session shape and waits for each answer."""

    def __init__(self, tg: FakeTelegram, shape: str) -> None:
        self.tg = tg
        self.chats = SHAPES[shape][:2]
        self.opts = SHAPES[shape][2]
        self.prefix = "@hermes_bot " if self.opts else ""

    async def say(self, user: int, words: str) -> None:
        chat = self.chats[user - 1]
        before = len(self.tg.messages_to(chat))
        self.tg.send_text(chat, self.prefix + words, user_id=user, username=f"u{user}", **self.opts)
        await self.tg.wait_sent(before + 1, chat_id=chat, timeout=15)


def look_everywhere() -> Any:
    return tool_calls(
        ("memory", {"action": "view"}),
        ("hindsight_recall", {"query": "PIN code"}),
        ("session_search", {"query": "PIN"}),
    )


def seen(body: dict[str, Any]) -> tuple[str, list[str]]:
    """The system prompt and the last three tool observations of a request."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return body["messages"][0]["content"], results[-3:]


@pytest.mark.parametrize("shape", list(SHAPES))
async def test_one_users_memory_never_reaches_another(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, shape: str
) -> None:
    chats = Chats(tg, shape)
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        fake_llm.push(
            tool_calls(
                ("memory", {"action": "add", "content": f"PIN is {SECRET}"}),
                ("hindsight_retain", {"content": f"My PIN code is {SECRET}"}),
            ),
            text("Noted."),
        )
        await chats.say(1, f"my PIN is {SECRET}, remember it")
        fake_llm.push(look_everywhere(), text("I don't know."))
        await chats.say(2, "what is the PIN?")
        other_prompt, others = seen(fake_llm.requests[-1])
        fake_llm.push(look_everywhere(), text("It is 4321."))
        await chats.say(1, "what is my PIN?")
        _, own = seen(fake_llm.requests[-1])
    assert SECRET not in other_prompt
    assert len(others) == 3 and not [o for o in others if SECRET in o], others
    assert len(own) == 3 and all(SECRET in o for o in own), own  # the owner finds it each way
    assert (gw.config.home_path / "memory" / "telegram" / "1.md").read_text() == "PIN is 4321\n"


async def test_the_prompt_carries_only_its_own_users_memory(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg)
    users = config.home_path / "memory" / "telegram"
    users.mkdir(parents=True)
    (users / "1.md").write_text("Likes green tea.\n")
    (config.home_path / "MEMORY.md").write_text("Legacy shared note.\n")
    with capture_logs() as logs:
        async with running_gateway(config) as (gw, api):
            for shape in SHAPES:
                for user in (1, 2):
                    await Chats(tg, shape).say(user, f"hello from {user}")
            _, status = await api.get("/status", operator=True)
    prompts = [r["messages"][0]["content"] for r in fake_llm.requests]
    assert len(prompts) == 6
    dm1, dm2, group1, group2, thread1, thread2 = prompts
    assert "- Likes green tea." in dm1 and "- Likes green tea." in group1
    for prompt in (dm2, group2, thread1, thread2):  # a shared thread shows no one's notes
        assert "green tea" not in prompt
    assert not [p for p in prompts if "Legacy shared note" in p]
    [legacy] = [e for e in logs if e["event"] == "memory.legacy_file"]
    assert "MEMORY.md is from before memory was kept per user" in legacy["detail"]
    assert (config.home_path / "MEMORY.md").exists()  # left in place, not moved
    assert status["memory"]["legacy_memory_md"] == legacy["detail"]  # `hermes status` shows it


async def test_the_shared_scope_keeps_one_memory_md(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg, scope="shared")
    config.home_path.mkdir(parents=True)
    (config.home_path / "MEMORY.md").write_text("Owner runs Debian.\n")
    with capture_logs() as logs:
        async with running_gateway(config) as (gw, _):
            await Chats(tg, "dm").say(2, "hi")
    assert "- Owner runs Debian." in fake_llm.requests[0]["messages"][0]["content"]
    assert not [e for e in logs if e["event"] == "memory.legacy_file"]
