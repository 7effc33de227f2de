"""`hermes gateway run` as a real process, two Telegram users in DMs, per-user memory and the
archive with auto-retain: what Alice has the agent remember reaches her next session's prompt
and her recall, never Bob's prompt, recall or search."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess, telegram_config
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"
ALICE, BOB = 555, 556
TOOLS = ["memory", "session_search", "hindsight_retain", "hindsight_recall"]


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def memory_gateway(home: Path, llm: FakeOpenAI, fake: FakeTelegram) -> GatewayProcess:
    config = telegram_config(
        llm,
        fake,
        TOKEN,
        [ALICE, BOB],
        tools={"enabled": TOOLS},
        memory={"auto_retain": True},
    )
    return GatewayProcess(home, config)


def say(tg: FakeTelegram, user: int, words: str) -> None:
    before = len(tg.messages_to(user))
    tg.send_text(user, words, username=f"u{user}")
    wait_until(lambda: len(tg.messages_to(user)) > before, timeout=20)


def look_everywhere() -> Any:
    return tool_calls(
        ("memory", {"action": "view"}),
        ("hindsight_recall", {"query": "PIN code"}),
        ("session_search", {"query": "PIN"}),
    )


def seen(body: dict[str, Any]) -> tuple[str, list[str]]:
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return body["messages"][0]["content"], results[-3:]


def test_two_users_memories_stay_their_own(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    gateway = memory_gateway(tmp_path / "home", fake_llm, tg)
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200)
        fake_llm.push(
            tool_calls(
                ("memory", {"action": "add", "content": "PIN is 4321"}),
                ("hindsight_retain", {"content": "The door PIN code is 4321"}),
            ),
            text("Noted."),
        )
        say(tg, ALICE, "the door PIN is 4321, remember it")
        fake_llm.push(look_everywhere(), text("I don't know."))
        say(tg, BOB, "what is the PIN?")
        bob_prompt, bob_saw = seen(fake_llm.requests[-1])
        say(tg, ALICE, "/new")
        fake_llm.push(look_everywhere(), text("4321."))
        say(tg, ALICE, "what is my PIN?")
        alice_prompt, alice_saw = seen(fake_llm.requests[-1])
        gateway.signal(signal.SIGTERM)
        code = gateway.wait(15)
    finally:
        gateway.kill()
    assert code == 0, gateway.stderr()
    assert "4321" not in bob_prompt and not [o for o in bob_saw if "4321" in o], bob_saw
    assert "- PIN is 4321" in alice_prompt  # her new session's prompt carries her memory
    assert len(alice_saw) == 3 and all("4321" in o for o in alice_saw), alice_saw
    memory_file = tmp_path / "home" / "memory" / "telegram" / f"{ALICE}.md"
    assert memory_file.read_text() == "PIN is 4321\n"
    assert fake_llm.embedding_inputs  # retain and recall went through /v1/embeddings
