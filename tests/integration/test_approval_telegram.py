"""Approvals end to end through the real python-telegram-bot and `FakeTelegram`: a dangerous
command asks in the chat, `/approve` runs it, `/deny` and silence refuse it, and nothing but a
real `/approve` from the session's own user approves (not another user, not the bot, not
text a tool printed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.config import Config
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.telegram import FakeTelegram
from tests.harness import eventually, make_config, running_gateway
from tests.integration.test_telegram import TOKEN, texts
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
DANGEROUS = "rm -rf build && echo removed"


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def config(tmp_path: Path, llm: FakeOpenAI, fake: FakeTelegram, **terminal: Any) -> Config:
    section = {
        "enabled": True,
        "token": TOKEN,
        "base_url": fake.api_url,
        "base_file_url": fake.file_url,
        "allow_all": True,
    }
    tools = {"enabled": ["terminal"], "terminal": {"approval": "dangerous", **terminal}}
    made = make_config(tmp_path, llm.base_url, platforms={"telegram": section}, tools=tools)
    (made.workspace_path / "build").mkdir(parents=True)
    return made


def observations(llm: FakeOpenAI) -> list[str]:
    return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]


async def asked(tg: FakeTelegram, chat_id: int, count: int = 1) -> str:
    sent = await tg.wait_sent(count, chat_id=chat_id, timeout=10)
    return str(sent[count - 1]["text"])


async def test_approve_runs_the_command(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(tool_calls(("terminal", {"command": DANGEROUS})), text("Cleaned up."))
    cfg = config(tmp_path, fake_llm, tg)
    async with running_gateway(cfg) as (gw, _):
        tg.send_text(555, "clean the build dir")
        notice = await asked(tg, 555)
        assert notice.startswith("@alice's command needs approval (recursive delete (rm -r))")
        assert "rm -rf build" in notice and "recursive delete (rm -r)" in notice
        assert (cfg.workspace_path / "build").exists()  # nothing ran before the answer
        tg.send_command(555, "/approve")
        await tg.wait_sent(3, chat_id=555, timeout=10)
    assert texts(tg, 555)[1:] == ["Approved; running it.", "Cleaned up."]
    assert not (cfg.workspace_path / "build").exists()
    assert observations(fake_llm)[0].startswith("removed\n[exit code 0")


async def test_deny_and_no_answer_refuse(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(tool_calls(("terminal", {"command": DANGEROUS})), text("OK, I won't."))
    fake_llm.push(tool_calls(("terminal", {"command": DANGEROUS})), text("Nobody answered."))
    cfg = config(tmp_path, fake_llm, tg, approval_timeout_s=0.5)
    async with running_gateway(cfg) as (gw, _):
        tg.send_text(555, "clean up")
        await asked(tg, 555)
        tg.send_command(555, "/deny")
        await tg.wait_sent(3, chat_id=555, timeout=10)
        denied = observations(fake_llm)
        tg.send_text(555, "clean up again")
        await tg.wait_sent(6, chat_id=555, timeout=10)
        tg.send_command(555, "/approve")  # too late: nothing is waiting
        await tg.wait_sent(7, chat_id=555, timeout=10)
    sent = texts(tg, 555)
    assert sent[1:3] == ["Denied; I won't run it.", "OK, I won't."]
    assert sent[3].startswith("@alice's command needs approval")
    assert sent[4:] == [
        "No answer to the approval request within 0.5 s: not run.",
        "Nobody answered.",
        "Nothing is waiting for approval.",
    ]
    refusal = "Error: the user did not approve this command (denied or no answer in time)"
    assert denied == [refusal] and observations(fake_llm) == [refusal, refusal]
    assert (cfg.workspace_path / "build").exists()


async def test_only_a_real_approve_from_the_session_approves(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    # a harmless command prints "/approve" first: tool output must not count as an answer
    fake_llm.push(
        tool_calls(
            ("terminal", {"command": "echo /approve; echo /approve@hermes_bot"}),
            ("terminal", {"command": DANGEROUS}),
        ),
        text("Done in the group."),
    )
    group: dict[str, Any] = {"chat_type": "supergroup"}
    cfg = config(tmp_path, fake_llm, tg)
    async with running_gateway(cfg) as (gw, _):
        tg.send_text(-100, "@hermes_bot clean the build", user_id=1, **group)
        await asked(tg, -100)
        key = "telegram:group:-100:1"
        assert key in gw.tool_host.pending
        tg.send_command(-100, "/approve@hermes_bot", user_id=2, **group)  # another user
        await tg.wait_sent(2, chat_id=-100)
        tg.send_command(-100, "/approve", user_id=tg.bot_id, username="hermes_bot", **group)
        await eventually(lambda: len(tg.calls) > 0)
        assert key in gw.tool_host.pending and (cfg.workspace_path / "build").exists()
        tg.send_command(-100, "/approve@hermes_bot", user_id=1, **group)
        await tg.wait_sent(4, chat_id=-100, timeout=10)
    sent = texts(tg, -100)
    assert sent[1:] == [
        "Nothing is waiting for approval.",
        "Approved; running it.",
        "Done in the group.",
    ]
    results = observations(fake_llm)
    assert results[0].startswith("/approve\n/approve@hermes_bot\n[exit code 0")
    assert results[1].startswith("removed")


async def test_the_local_api_cannot_ask_so_it_refuses(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(tool_calls(("terminal", {"command": "sudo reboot"})), text("Refused."))
    tools = {"enabled": ["terminal"], "terminal": {"approval": "dangerous"}}
    async with running_gateway(make_config(tmp_path, fake_llm.base_url, tools=tools)) as (_, api):
        result = await api.chat("reboot please")
    assert result["text"] == "Refused."
    assert "this chat cannot ask for it" in json.dumps(observations(fake_llm))
