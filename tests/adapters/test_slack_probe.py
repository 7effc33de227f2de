"""`hermes doctor`'s Slack check says when the bot token lacks `files:write`, which `send_file`
needs to share files (Slack lists a token's scopes in its answers' `x-oauth-scopes`)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from adapters.slack.probe import probe
from adapters.slack.settings import SlackConfig
from tests.fakes.slack import FakeSlack


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    try:
        yield fake
    finally:
        fake.stop()


def check(slack: FakeSlack) -> str:
    section = SlackConfig(enabled=True, bot_token=slack.bot_token, api_base=slack.api_base)
    with httpx.Client(timeout=10) as http:
        return probe(section, http)


def test_a_token_without_files_write_is_named(slack: FakeSlack) -> None:
    slack.scopes = ["chat:write", "im:history"]
    verdict = check(slack)
    assert verdict.startswith("token valid") and "no files:write scope" in verdict


def test_a_token_with_files_write_passes_plainly(slack: FakeSlack) -> None:
    slack.scopes = ["chat:write", "files:write"]
    assert "files:write" not in check(slack)
