"""`hermes gateway run` as a real process with Slack in Socket Mode: the fake Slack server and
the fake LLM answer a DM end to end; SIGTERM stops it cleanly."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.fakes.slack import FakeSlack

pytestmark = pytest.mark.e2e


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def test_a_dm_is_answered_by_the_daemon_and_sigterm_exits_0(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    gateway = GatewayProcess(
        tmp_path / "home",
        {
            "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0},
            "platforms": {
                "slack": {
                    "enabled": True,
                    "api_base": slack.api_base,
                    "allowed_users": ["U123"],
                    "ping_interval_s": 0.5,
                }
            },
        },
        # the tokens come from the environment, as in a systemd unit's EnvironmentFile
        env={"SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token},
    )
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=5).status_code == 200)
        ts = slack.send_message("hello daemon", channel="D1")["event"]["ts"]
        wait_until(lambda: slack.messages_in("D1"), timeout=20)
        assert [m["text"] for m in slack.messages_in("D1")] == ["echo: hello daemon"]
        wait_until(lambda: len(slack.reactions) == 2)
        assert [r[0] for r in slack.reactions] == ["add", "remove"]
        assert slack.reactions[0][2] == ts
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(15) == 0
    finally:
        gateway.kill()
    events = [e["event"] for e in gateway.log_events()]
    assert "slack.started" in events
    assert events.index("gateway.ready") < events.index("gateway.stopped")
    assert "xoxb-fake" not in (tmp_path / "home" / "logs" / "gateway.log").read_text()


def test_a_rejected_token_exits_78_naming_the_cause(tmp_path: Path, slack: FakeSlack) -> None:
    gateway = GatewayProcess(
        tmp_path / "home",
        {"platforms": {"slack": {"enabled": True, "api_base": slack.api_base}}},
        env={"SLACK_BOT_TOKEN": "xoxb-revoked", "SLACK_APP_TOKEN": slack.app_token},
    )
    try:
        gateway.start(wait=False)
        assert gateway.wait(20) == 78  # a configuration error: systemd must not restart it
    finally:
        gateway.kill()
    assert "invalid_auth" in gateway.stderr()
