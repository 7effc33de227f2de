"""Slack files fetched on demand: `vision_analyze` on an image a user shared, downloaded from
``url_private`` with the bot token (sent, never logged) through real slack-bolt against
`FakeSlack`; files over the cap and failing downloads come back as clear tool errors."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from adapters.slack.adapter import SlackAdapter
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.slack import FakeSlack
from tests.integration.test_slack import answered, slack_config, started
from tests.integration.test_tools_gateway import PNG, observations

VISION = {"tools": {"enabled": ["vision_analyze"], "vision": {"model": "vision-model"}}}
FAILED = "Error: the attachment could not be fetched: "


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def media_files(tmp_path: Path) -> list[str]:
    media = tmp_path / "home" / "media"
    return sorted(p.name for p in media.iterdir()) if media.exists() else []


def assert_never_logged(
    secret: str, events: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    """Neither structlog events nor stdlib records (aiohttp, slack-sdk, at debug) hold it."""
    assert events and caplog.records
    assert not [e for e in events if secret in repr(e)]
    assert not [r for r in caplog.records if secret in r.getMessage() or secret in repr(r.args)]


async def test_vision_reads_a_shared_image_with_the_bot_token(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    picture = slack.add_file("dot.png", PNG, "image/png")
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1, "question": "What colour?"})),
        text("A single red pixel."),
        text("Your picture is one red dot."),
    )
    with capture_logs() as events:
        async with started(slack_config(tmp_path, fake_llm, slack, sections=VISION)):
            assert media_files(tmp_path) == []
            slack.send_message("what is this?", channel="D1", files=[picture])
            assert await answered(slack, "D1") == ["Your picture is one red dot."]
    parts = fake_llm.requests[1]["messages"][0]["content"]
    assert fake_llm.requests[1]["model"] == "vision-model"
    assert parts[0] == {"type": "text", "text": "What colour?"}
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert observations(fake_llm.requests[2]) == ["A single red pixel."]
    [download] = slack.downloads
    assert (download["authorization"], download["status"]) == (f"Bearer {slack.bot_token}", 200)
    assert media_files(tmp_path) == [f"{picture['id']}-dot.png"]
    assert "media.downloaded" in [e["event"] for e in events]
    assert_never_logged(slack.bot_token, events, caplog)
    assert slack.bot_token not in json.dumps(fake_llm.requests)


async def test_files_over_the_cap_are_refused_and_nothing_is_written(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    big = slack.add_file("big.png", PNG + bytes(2000), "image/png")
    # announces a small size, then streams more than the cap without a Content-Length
    liar = slack.add_file("liar.png", PNG + bytes(50_000), "image/png", size=10, chunked=True)
    fake_llm.push(
        tool_calls(("vision_analyze", {"attachment": 1}), ("vision_analyze", {"attachment": 2})),
        text("Both are too big for me."),
    )
    config = slack_config(tmp_path, fake_llm, slack, sections=VISION, media_max_bytes=1000)
    async with started(config):
        slack.send_message("look", channel="D1", files=[big, liar])
        assert await answered(slack, "D1") == ["Both are too big for me."]
    refused_big, refused_liar = observations(fake_llm.requests[1])
    assert refused_big == f"{FAILED}big.png is {len(PNG) + 2000} bytes (the cap is 1000)"
    assert refused_liar.startswith(f"{FAILED}liar.png is over the cap of 1000 bytes (stopped")
    assert refused_liar.endswith("though 10 were announced)")
    assert [d["path"].rsplit("/", 1)[-1] for d in slack.downloads] == ["liar.png"]
    assert media_files(tmp_path) == []


async def test_failing_downloads_give_clear_errors_and_never_log_the_token(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    picture = slack.add_file("dot.png", PNG, "image/png")
    with capture_logs() as events:
        async with started(slack_config(tmp_path, fake_llm, slack, sections=VISION)) as (gw, _):
            cast(SlackAdapter, gw.adapters["slack"]).files.base_delay = 0.01
            slack.fail_download_next(500, times=3)
            fake_llm.push(tool_calls(("vision_analyze", {"attachment": 1})), text("It is down."))
            slack.send_message("what is this?", channel="D1", files=[picture])
            await answered(slack, "D1")
            slack.fail_download_next(403)  # what Slack answers a token without files:read
            fake_llm.push(tool_calls(("vision_analyze", {"attachment": 1})), text("No access."))
            slack.send_message("and now?", channel="D1", files=[picture])
            assert await answered(slack, "D1", count=2) == ["It is down.", "No access."]
    assert observations(fake_llm.requests[1]) == [f"{FAILED}slack answered HTTP 500 for dot.png"]
    assert observations(fake_llm.requests[3])[-1] == (
        f"{FAILED}slack answered HTTP 403 for dot.png (the bot token needs the files:read scope)"
    )
    assert [d["status"] for d in slack.downloads] == [500, 500, 500, 403]
    assert {d["authorization"] for d in slack.downloads} == {f"Bearer {slack.bot_token}"}
    assert media_files(tmp_path) == []
    assert [e["event"] for e in events].count("media.download_failed") == 2
    assert_never_logged(slack.bot_token, events, caplog)
