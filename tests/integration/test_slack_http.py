"""The Slack adapter in HTTP (Events API) mode: signed POSTs to `events_path` on the control
server, verified by slack-bolt; acked once in the inbox (before the model answers), answered through
the Web API fake."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.config import Config
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.slack import (
    FakeSlack,
    make_message_event,
    make_url_verification,
    sign_request,
)
from tests.harness import eventually, running_gateway
from tests.integration.test_slack import (
    ALICE,
    accepted,
    answered,
    slack,
    slack_config,
    started,
    texts,
)

__all__ = ["slack"]  # the fixture, shared with test_slack.py
SECRET = "s3cret"


def http_config(tmp_path: Path, llm: FakeOpenAI, fake: FakeSlack, **slack: Any) -> Config:
    # a control token proves the events route is public: Slack signs, it sends no bearer token
    return slack_config(
        tmp_path,
        llm,
        fake,
        mode="http",
        app_token="",
        signing_secret=SECRET,
        sections={"control": {"token": "ctl-secret"}},
        **slack,
    )


def dm(fake: FakeSlack, words: str, channel: str = "D1", **fields: Any) -> dict[str, Any]:
    return make_message_event(words, ALICE, channel, fake.next_ts(), **fields)


async def test_signed_event_is_acked_at_once_and_answered(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.push(text("over http", delay=0.8))
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        url = f"{client.base}/slack/events"
        began = time.monotonic()
        status, body = await slack.post_event_async(url, dm(slack, "hi"), signing_secret=SECRET)
        acked_in = time.monotonic() - began
        assert slack.messages_in("D1") == []  # acked before the model answered
        assert await answered(slack, "D1") == ["over http"]
        ready = await client.get("/readyz")
    assert (status, body) == (200, "")
    assert acked_in < 0.5
    assert ready[0] == 200
    assert slack.connections == 0  # no socket in HTTP mode


async def test_bad_signatures_and_stale_timestamps_get_401_and_are_not_processed(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        url = f"{client.base}/slack/events"
        event = dm(slack, "forged")
        wrong = await slack.post_event_async(url, event, signing_secret="not-it")
        garbled = await slack.post_event_async(
            url, event, signing_secret=SECRET, bad_signature=True
        )
        stale = await slack.post_event_async(
            url, event, signing_secret=SECRET, timestamp=int(time.time()) - 600
        )
        assert [wrong[0], garbled[0], stale[0]] == [401, 401, 401]
        good = await slack.post_event_async(url, dm(slack, "genuine"), signing_secret=SECRET)
        assert good[0] == 200
        assert await answered(slack, "D1") == ["echo: genuine"]
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["genuine"]


async def test_url_verification_is_answered(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        url = f"{client.base}/slack/events"
        verification = make_url_verification("abc123")
        status, body = await slack.post_event_async(url, verification, signing_secret=SECRET)
    assert (status, body) == (200, '{"challenge": "abc123"}')


async def test_retried_post_and_mention_pair_are_answered_once(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        url = f"{client.base}/slack/events"
        payload = slack.event_callback(dm(slack, "once over http"))
        for attempt in (0, 1):
            posted = await slack.post_event_async(
                url, payload, signing_secret=SECRET, retry_attempt=attempt
            )
            assert posted[0] == 200
        ts = slack.next_ts()
        mention = {"type": "app_mention", "user": ALICE, "text": "<@U0BOT> hey", "ts": ts}
        mention["channel"] = "C1"
        await slack.post_event_async(url, mention, signing_secret=SECRET)
        await slack.post_event_async(
            url, make_message_event("<@U0BOT> hey", ALICE, "C1", ts), signing_secret=SECRET
        )
        assert await answered(slack, "C1", thread_ts=ts) == ["echo: hey"]
        await answered(slack, "D1")
        await slack.post_event_async(url, dm(slack, "sentinel", "D9"), signing_secret=SECRET)
        await answered(slack, "D9")
        assert accepted(gw) == 3
    assert texts(slack, "D1") == ["echo: once over http"]
    assert len(fake_llm.requests) == 3


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"type": "event_callback", "event": 5}'])
async def test_odd_bodies_do_not_break_the_endpoint(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, body: bytes
) -> None:
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        url = f"{client.base}/slack/events"
        headers = sign_request(SECRET, body, int(time.time()))
        async with client.http.post(url, data=body, headers=headers) as response:
            status = response.status
        again = await slack.post_event_async(url, dm(slack, "still fine"), signing_secret=SECRET)
        assert await answered(slack, "D1") == ["echo: still fine"]
    assert status in (200, 400)
    assert again[0] == 200


async def test_events_before_the_adapter_is_up_get_503(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    slack.fail_next("auth.test", status=503)  # the first auth.test fails: retried in background
    async with running_gateway(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        url = f"{client.base}/slack/events"
        early = await slack.post_event_async(url, dm(slack, "too early"), signing_secret=SECRET)
        await eventually(lambda: gw.adapters["slack"].health().ready)
        status, _ = await slack.post_event_async(url, dm(slack, "now"), signing_secret=SECRET)
        assert await answered(slack, "D1") == ["echo: now"]
    assert (early[0], status) == (503, 200)  # Slack retries the 503 later
    assert len(slack.calls_to("auth.test")) == 2
