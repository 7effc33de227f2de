"""Slack HTTP events and the inbox write: an event is acked (200) only once it is in the inbox,
an event the store could not take gets a 503 so that Slack delivers it again, and a retry that
comes while the first copy is still being written waits for it. Slack's last retry that the
store still cannot take is acked and its user told."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.integration.test_slack import accepted, answered, slack, started, texts
from tests.integration.test_slack_http import SECRET, dm, http_config

__all__ = ["slack"]


async def test_an_event_is_acked_only_once_it_is_in_the_inbox(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acked before the write, a kill (or a failed write) in between lost the message."""
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        entered, release = asyncio.Event(), asyncio.Event()
        accept = gw.store.accept

        async def slow_accept(event: MessageEvent) -> int | None:
            entered.set()
            await release.wait()  # a slow database
            return await accept(event)

        monkeypatch.setattr(gw.store, "accept", slow_accept)
        url = f"{client.base}/slack/events"
        post = asyncio.create_task(
            slack.post_event_async(url, dm(slack, "keep me"), signing_secret=SECRET)
        )
        await asyncio.wait_for(entered.wait(), 10)
        await asyncio.sleep(0.3)  # time enough for an early ack to arrive
        early = post.done()
        release.set()
        status, _ = await post
        stored_at_ack = accepted(gw)
        assert await answered(slack, "D1") == ["echo: keep me"]
    assert not early
    assert (status, stored_at_ack) == (200, 1)


async def test_a_failed_inbox_write_gets_503_and_the_retry_is_answered_once(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first delivery's write times out; Slack's retry (X-Slack-Retry-Num 1) arrives
    while it is still pending: it waits, and is taken once the first is refused."""
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):
        entered, release = asyncio.Event(), asyncio.Event()
        accept = gw.store.accept
        calls: list[str] = []

        async def failing_once(event: MessageEvent) -> int | None:
            calls.append(event.message_id)
            if len(calls) == 1:
                entered.set()
                await release.wait()
                raise StoreError("store write failed: TimeoutError")
            return await accept(event)

        monkeypatch.setattr(gw.store, "accept", failing_once)
        url = f"{client.base}/slack/events"
        payload = slack.event_callback(dm(slack, "once please"))

        def deliver(attempt: int) -> asyncio.Task[tuple[int, Any]]:
            return asyncio.create_task(
                slack.post_event_async(url, payload, signing_secret=SECRET, retry_attempt=attempt)
            )

        first = deliver(0)
        await asyncio.wait_for(entered.wait(), 10)
        retry = deliver(1)
        await asyncio.sleep(0.3)  # the retry is in, waiting for the first copy
        retry_waited = not retry.done()
        release.set()
        first_status, retry_status = (await first)[0], (await retry)[0]
        assert await answered(slack, "D1") == ["echo: once please"]
        again = await deliver(2)  # a late third copy: a repeat, acked
        await asyncio.sleep(0.5)
    assert retry_waited
    assert (first_status, retry_status, again[0]) == (503, 200, 200)
    assert texts(slack, "D1") == ["echo: once please"]
    assert len(fake_llm.requests) == 1
    assert len(calls) == 2  # the third copy was dropped before the store


async def test_the_last_retry_the_store_cannot_take_is_acked_and_its_user_told(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with started(http_config(tmp_path, fake_llm, slack)) as (gw, client):

        async def failing(event: MessageEvent) -> int | None:
            raise StoreError("store write failed: TimeoutError")

        monkeypatch.setattr(gw.store, "accept", failing)
        url = f"{client.base}/slack/events"
        payload = slack.event_callback(dm(slack, "lost?"))
        statuses = [
            (await slack.post_event_async(url, payload, signing_secret=SECRET, retry_attempt=n))[0]
            for n in (0, 1, 2, 3)
        ]
        [notice] = await answered(slack, "D1")
    assert statuses == [503, 503, 503, 200]
    assert "send it again" in notice
    assert fake_llm.requests == []
