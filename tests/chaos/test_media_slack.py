"""Files the agent sends (`send_file`) on Slack, end to end through `hermes gateway run`: the
text, then each file shared by files_upload_v2 (its upload URL, the bytes, the completion), once;
a SIGKILL right after Slack took the text, or shared the file, leaves exactly one of each after
the restart (the file is found in the history by its name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.killing import KillingSlack
from tests.chaos.test_exactly_once import crash_then_restart, model, start, stop
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until

pytestmark = [pytest.mark.e2e]
CSV = "a,b\n1,2\n"
ANSWER = "Here is the report."


@pytest.fixture
def slack() -> Iterator[KillingSlack]:
    fake = KillingSlack().start()
    try:
        yield fake
    finally:
        fake.stop()


def slack_gateway(home: Path, slack: KillingSlack, llm: FakeOpenAI) -> GatewayProcess:
    section = {
        "enabled": True,
        "api_base": slack.api_base,
        "allowed_users": ["U123"],
        "ping_interval_s": 0.5,
    }
    config = {
        "model": model(llm),
        "platforms": {"slack": section},
        "tools": {"enabled": ["write_file", "send_file"]},
    }
    env = {"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    return GatewayProcess(home, config, env=env)


def script(llm: FakeOpenAI) -> None:
    llm.push(
        tool_calls(("write_file", {"path": "report.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "report.csv", "caption": "the numbers"})),
        text(ANSWER),
    )


def shown(slack: KillingSlack) -> list[tuple[str, list[str]]]:
    return [(m["text"], [f["name"] for f in m.get("files") or []]) for m in slack.messages_in("D1")]


EXPECTED = [(ANSWER, []), ("the numbers", ["report.csv"])]


def test_the_file_is_shared_after_the_text_once(
    tmp_path: Path, llm: FakeOpenAI, slack: KillingSlack
) -> None:
    gw = slack_gateway(tmp_path / "home", slack, llm)
    script(llm)
    try:
        start(gw)
        slack.send_message("report please", channel="D1")
        wait_until(lambda: len(slack.uploads) >= 1, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert shown(slack) == EXPECTED
    assert [(u["filename"], u["data"]) for u in slack.uploads] == [("report.csv", CSV.encode())]


@pytest.mark.parametrize("cut", ["Here", "file:report.csv"])
def test_a_kill_between_the_text_and_the_upload_leaves_one_of_each(
    tmp_path: Path, llm: FakeOpenAI, slack: KillingSlack, cut: str
) -> None:
    gw = slack_gateway(tmp_path / "home", slack, llm)
    script(llm)
    try:
        ask = lambda: slack.send_message("report", channel="D1")  # noqa: E731
        crash_then_restart(gw, slack.trigger, cut, ask)
        wait_until(lambda: len(slack.uploads) >= 1, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert shown(slack) == EXPECTED
    assert len(slack.uploads) == 1
    assert len(llm.requests) == 3


def test_a_file_over_the_limit_is_refused_to_the_model(
    tmp_path: Path, llm: FakeOpenAI, slack: KillingSlack
) -> None:
    gw = slack_gateway(tmp_path / "home", slack, llm)
    workspace = tmp_path / "home" / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    with (workspace / "huge.bin").open("wb") as fh:  # sparse: over Slack's 1 GB on paper
        fh.truncate(1025 * 1024 * 1024)
    llm.push(tool_calls(("send_file", {"path": "huge.bin"})), text("Too big."))
    try:
        start(gw)
        slack.send_message("the big one", channel="D1")
        wait_until(lambda: len(slack.messages_in("D1")) >= 1, timeout=30)
        stop(gw)
    finally:
        gw.kill()
    assert slack.uploads == [] and shown(slack) == [("Too big.", [])]
    told = next(m for m in llm.requests[-1]["messages"] if m["role"] == "tool")["content"]
    assert "1025.0 MB" in told and "1024.0 MB" in told
