"""Files the agent sends (`send_file`) on Discord, end to end through `hermes gateway run`: the
text, then each file as a message attachment, once; a SIGKILL right after Discord took the text,
or the upload, leaves exactly one of each after the restart (the part's nonce); a file over
Discord's 10 MB is refused to the model and the user still gets the text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.killing import KillingDiscord
from tests.chaos.test_exactly_once import crash_then_restart, model, start, stop
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.integration.test_discord_kit import ALICE

pytestmark = [pytest.mark.e2e]
CSV = "a,b\n1,2\n"
ANSWER = "Here is the report."


@pytest.fixture
def dc() -> Iterator[KillingDiscord]:
    fake = KillingDiscord().start()
    try:
        yield fake
    finally:
        fake.stop()
    assert fake.errors == []


def discord_gateway(home: Path, dc: KillingDiscord, llm: FakeOpenAI) -> GatewayProcess:
    section = {
        "enabled": True,
        "token": "dc-token",
        "api_base": dc.api_base,
        "gateway_url": dc.gateway_url,
        "allowed_users": [ALICE],
        "guild_ready_timeout_s": 0.05,
    }
    tools = {"enabled": ["write_file", "send_file"]}
    return GatewayProcess(
        home, {"model": model(llm), "platforms": {"discord": section}, "tools": tools}
    )


def shown(dc: KillingDiscord) -> list[tuple[str, Any]]:
    """The bot's messages in order: their text, and the files attached (name, bytes)."""
    return [
        (m["content"], [(a["filename"], dc.uploads[i]["data"]) for i, a in _files(dc, m)])
        for m in dc.sent
    ]


def _files(dc: KillingDiscord, message: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    names = [u["filename"] for u in dc.uploads]
    return [(names.index(a["filename"]), a) for a in message.get("attachments") or []]


def script(llm: FakeOpenAI) -> None:
    llm.push(
        tool_calls(("write_file", {"path": "report.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "report.csv", "caption": "the numbers"})),
        text(ANSWER),
    )


EXPECTED = [(ANSWER, []), ("the numbers", [("report.csv", CSV.encode())])]


def test_the_file_goes_after_the_text_once(
    tmp_path: Path, llm: FakeOpenAI, dc: KillingDiscord
) -> None:
    gw = discord_gateway(tmp_path / "home", dc, llm)
    script(llm)
    try:
        start(gw)
        dc.send_dm("report please", user_id=ALICE)
        wait_until(lambda: len(dc.sent) >= 2, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert shown(dc) == EXPECTED
    assert len(dc.uploads) == 1


@pytest.mark.parametrize("cut", ["Here", "the numbers"])
def test_a_kill_between_the_text_and_the_upload_leaves_one_of_each(
    tmp_path: Path, llm: FakeOpenAI, dc: KillingDiscord, cut: str
) -> None:
    gw = discord_gateway(tmp_path / "home", dc, llm)
    script(llm)
    try:
        crash_then_restart(gw, dc.trigger, cut, lambda: dc.send_dm("report", user_id=ALICE))
        wait_until(lambda: len(dc.sent) >= 2, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert shown(dc) == EXPECTED
    assert len(dc.uploads) == 1
    assert len(llm.requests) == 3


def test_a_file_over_the_limit_is_refused_to_the_model(
    tmp_path: Path, llm: FakeOpenAI, dc: KillingDiscord
) -> None:
    gw = discord_gateway(tmp_path / "home", dc, llm)
    workspace = tmp_path / "home" / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    with (workspace / "huge.bin").open("wb") as fh:  # sparse
        fh.truncate(11 * 1024 * 1024)
    llm.push(tool_calls(("send_file", {"path": "huge.bin"})), text("Too big."))
    try:
        start(gw)
        dc.send_dm("the big one", user_id=ALICE)
        wait_until(lambda: len(dc.sent) >= 1, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert dc.uploads == [] and [m["content"] for m in dc.sent] == ["Too big."]
    told = next(m for m in llm.requests[-1]["messages"] if m["role"] == "tool")["content"]
    assert "11.0 MB" in told and "10.0 MB" in told
