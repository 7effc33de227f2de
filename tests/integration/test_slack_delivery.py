"""Slack delivery through the real slack-sdk against `FakeSlack`: mrkdwn as it reaches
chat.postMessage, splitting, Retry-After and 5xx retries, progress, streaming by chat.update."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai import FakeOpenAI, error, text
from tests.fakes.slack import FakeSlack
from tests.harness import eventually
from tests.integration.test_slack import answered, slack, slack_config, started, texts

__all__ = ["slack"]  # the fixture, shared with test_slack.py


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __strong__", "*bold* and *strong*"),
        ("*italics* and _more_", "_italics_ and _more_"),
        ("~~struck~~ out", "~struck~ out"),
        ("see [the docs](https://example.com/a?b=1)", "see <https://example.com/a?b=1|the docs>"),
        ("run `ls -la` now", "run `ls -la` now"),
        ("```python\nprint('hi')\n```", "```\nprint('hi')\n```"),
        ("- one\n- two\n\n1. first\n2. second", "• one\n• two\n\n1. first\n2. second"),
        ("# Title\n\nbody", "*Title*\n\nbody"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
    ],
)
async def test_markdown_reaches_chat_post_message_as_mrkdwn(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, markdown: str, mrkdwn: str
) -> None:
    fake_llm.push(text(markdown))
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        slack.send_message("format this", channel="D1")
        assert await answered(slack, "D1") == [mrkdwn]


async def test_a_long_answer_is_split_on_paragraphs_under_the_limit_with_nothing_lost(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    paragraphs = [
        f"Paragraph {i}: " + " ".join(f"word{i}x{j}" for j in range(30)) for i in range(12)
    ]
    fake_llm.push(text("\n\n".join(paragraphs)))
    config = slack_config(tmp_path, fake_llm, slack, message_limit=1000)
    async with started(config) as (gw, client):
        ts = slack.send_mention("<@U0BOT> tell me everything", channel="C1")["event"]["ts"]
        await eventually(lambda: slack.calls_to("chat.postMessage"))
        await eventually(lambda: gw.runner.counts()["active"] == 0)
        parts = texts(slack, "C1", ts)
    assert len(parts) >= 4
    assert all(len(p) <= 1000 for p in parts)
    assert "\n\n".join(parts) == "\n\n".join(paragraphs)  # paragraph cuts only, in order
    assert len(slack.messages_in("C1")) == len(parts)  # every part in the thread


async def test_rate_limited_post_waits_retry_after_then_succeeds(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    slack.fail_next("chat.postMessage", status=429, retry_after=1)
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        slack.send_message("are you there?", channel="D1")
        await eventually(lambda: slack.calls_to("chat.postMessage"))
        first_try = time.monotonic()
        assert await answered(slack, "D1") == ["echo: are you there?"]
        waited = time.monotonic() - first_try
    assert len(slack.calls_to("chat.postMessage")) == 2
    assert 0.9 <= waited < 3


async def test_server_errors_are_retried_per_part_and_earlier_parts_not_resent(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.push(text("\n\n".join(f"part {i} " + "x" * 150 for i in range(3))))
    post = slack._methods["chat.postMessage"]

    def fail_after_the_first(params: dict[str, Any]) -> dict[str, Any]:
        result = post(params)
        if len(slack.posted) == 1:  # the second part meets two 5xx answers
            slack.fail_next("chat.postMessage", status=503, times=2)
        return result

    slack._methods["chat.postMessage"] = fail_after_the_first
    async with started(slack_config(tmp_path, fake_llm, slack, message_limit=200)) as (gw, _):
        slack.send_message("three parts please", channel="D1")
        sent = await answered(slack, "D1", 3)
    assert [s[:6] for s in sent] == ["part 0", "part 1", "part 2"]
    assert len(slack.calls_to("chat.postMessage")) == 5  # 3 parts + 2 retries of part 1


async def test_a_permanent_error_is_not_retried_and_progress_is_still_cleared(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    slack.fail_next("chat.postMessage", status=200, error="channel_not_found")
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        ts = slack.send_message("into the void", channel="D1")["event"]["ts"]
        await eventually(lambda: slack.calls_to("chat.postMessage"))
        await eventually(lambda: len(slack.reactions) == 2)
        failures = gw.metrics.delivery_failures.labels("slack")._value.get()
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert slack.reactions == [("add", "D1", ts, "eyes"), ("remove", "D1", ts, "eyes")]
    assert failures == 1


# -- progress ----------------------------------------------------------------------------------


async def test_progress_reaction_is_added_while_working_then_removed(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.push(text("done thinking", delay=0.5))
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        ts = slack.send_message("think hard", channel="D1")["event"]["ts"]
        await eventually(lambda: slack.reactions)
        assert slack.reactions == [("add", "D1", ts, "eyes")]
        assert slack.messages_in("D1") == []  # shown while the model works
        await answered(slack, "D1")
        await eventually(lambda: len(slack.reactions) == 2)
    assert slack.reactions[1] == ("remove", "D1", ts, "eyes")


async def test_progress_reaction_is_removed_when_the_model_fails(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.push(error(500))
    config = slack_config(tmp_path, fake_llm, slack, progress_reaction="hourglass")
    async with started(config) as (gw, client):
        ts = slack.send_mention("<@U0BOT> fail please", channel="C1")["event"]["ts"]
        [reply] = await answered(slack, "C1", thread_ts=ts)
        await eventually(lambda: len(slack.reactions) == 2)
    assert "500" in reply
    assert slack.reactions == [("add", "C1", ts, "hourglass"), ("remove", "C1", ts, "hourglass")]


async def test_progress_by_assistant_thread_status(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack, progress="status")) as (gw, _):
        ts = slack.send_message("status please", channel="D1")["event"]["ts"]
        await answered(slack, "D1")
        await eventually(lambda: len(slack.calls_to("assistant.threads.setStatus")) == 2)
    calls = slack.calls_to("assistant.threads.setStatus")
    assert [(c["channel_id"], c["thread_ts"], c["status"]) for c in calls] == [
        ("D1", ts, "is thinking…"),
        ("D1", ts, ""),
    ]
    assert slack.reactions == []


async def test_no_progress_when_typing_is_off(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack, typing=False)) as (gw, _):
        slack.send_message("quietly", channel="D1")
        await answered(slack, "D1")
        await eventually(lambda: gw.runner.counts()["active"] == 0)
        await gw.bus.aclose()  # every lifecycle event handled
    assert slack.reactions == []


# -- streaming ---------------------------------------------------------------------------------


async def test_streaming_edits_one_message_into_the_final_answer(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    answer = "Streaming **works**: " + " ".join(f"w{i}" for i in range(40))
    fake_llm.push(text(answer, chunk_size=8, chunk_delay=0.02))
    config = slack_config(tmp_path, fake_llm, slack, streaming=True)
    async with started(config) as (gw, client):
        gw.adapters["slack"].preview_interval = 0.05
        ts = slack.send_mention("<@U0BOT> stream it", channel="C1")["event"]["ts"]
        await answered(slack, "C1", thread_ts=ts)
        await eventually(lambda: slack.messages_in("C1", ts)[0]["text"].endswith("w39"))
        await eventually(lambda: gw.runner.counts()["active"] == 0)
    [message] = slack.messages_in("C1")  # exactly one message: the preview, edited
    assert message["thread_ts"] == ts
    assert message["text"] == "Streaming *works*: " + answer.split(": ", 1)[1]
    assert message["history"]  # it was a partial preview before
    assert all(answer.startswith(re.sub(r"\*works\*", "**works**", h)) for h in message["history"])
    assert len(slack.calls_to("chat.postMessage")) == 1


async def test_streaming_a_long_answer_edits_the_first_part_and_posts_the_rest(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    answer = "\n\n".join(f"section {i} " + "y" * 120 for i in range(4))
    fake_llm.push(text(answer, chunk_size=40, chunk_delay=0.02))
    config = slack_config(tmp_path, fake_llm, slack, streaming=True, message_limit=300)
    async with started(config) as (gw, client):
        gw.adapters["slack"].preview_interval = 0.05
        slack.send_message("long stream", channel="D1")
        await answered(slack, "D1", 2)
        await eventually(lambda: gw.runner.counts()["active"] == 0)
    assert "\n\n".join(texts(slack, "D1")) == answer
    assert slack.calls_to("chat.update")


async def test_an_interrupted_streamed_run_leaves_no_partial_message(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.push(text(" ".join(f"w{i}" for i in range(200)), chunk_size=4, chunk_delay=0.03))
    config = slack_config(tmp_path, fake_llm, slack, streaming=True)
    async with started(config) as (gw, client):
        gw.adapters["slack"].preview_interval = 0.05
        slack.send_message("a long essay please", channel="D1")
        await answered(slack, "D1")  # the first run's preview is up
        slack.send_message("no, just say hi", channel="D1")  # interrupts it
        await eventually(lambda: texts(slack, "D1") == ["echo: no, just say hi"])
        await eventually(lambda: slack.posted[0].get("deleted"))
    assert slack.posted[0]["text"].startswith("w0")  # the partial preview, now deleted
    assert len(slack.messages_in("D1")) == 1
