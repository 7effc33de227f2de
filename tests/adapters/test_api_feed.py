"""The local API's session feeds (`GET /v1/events`), in a gateway running in this loop: what is
sent unasked reaches every feed of its session and no other; a session's feeds and all feeds
together are capped (429 past the cap); a reader that stopped reading loses the oldest items,
never blocks the sender; a stopping gateway ends every feed with a `closing` event."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from adapters.api.adapter import ApiAdapter
from adapters.api.feed import QUEUE_SIZE
from hermes_gateway.events import Chat, OutboundMessage
from tests.fakes.openai import FakeOpenAI
from tests.harness import eventually, make_config, running_gateway


async def _items(response: aiohttp.ClientResponse, n: int) -> list[dict[str, Any]]:
    """The next ``n`` data items of a feed (comments skipped)."""
    got: list[dict[str, Any]] = []
    while len(got) < n:
        line = (await asyncio.wait_for(response.content.readline(), 10)).decode().strip()
        if line.startswith("data: "):
            got.append(json.loads(line[6:]))
    return got


def _unasked(chat_id: str, words: str) -> OutboundMessage:
    return OutboundMessage.to(Chat("api", chat_id, None, f"cron:{chat_id}"), words, "reply")


async def test_unasked_messages_reach_their_sessions_feeds_only(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        api = gw.adapters["api"]
        assert isinstance(api, ApiAdapter)
        url = f"{client.base}/v1/events"
        async with (
            aiohttp.ClientSession() as http,
            http.get(url, params={"user": "alice"}) as a1,
            http.get(url, params={"user": "alice"}) as a2,
            http.get(url, params={"user": "bob"}) as b,
        ):
            assert (a1.status, a2.status, b.status) == (200, 200, 200)
            await eventually(lambda: len(api.feeds) == 3)
            await api.send(_unasked("alice", "for alice"))
            await api.send(_unasked("bob", "for bob"))
            for feed in (a1, a2):
                [item] = await _items(feed, 1)
                assert (item["type"], item["content"], item["session"]) == (
                    "message",
                    "for alice",
                    "alice",
                )
            [item] = await _items(b, 1)
            assert item["content"] == "for bob"
        await eventually(lambda: len(api.feeds) == 0)  # a client gone is let go


async def test_feeds_are_capped_and_a_slow_reader_loses_the_oldest(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        api = gw.adapters["api"]
        assert isinstance(api, ApiAdapter)
        url = f"{client.base}/v1/events"
        async with aiohttp.ClientSession() as http:
            opened = [
                await http.get(url, params={"user": "alice"}) for _ in range(api.feeds.per_session)
            ]
            over = await http.get(url, params={"user": "alice"})
            assert over.status == 429
            assert (await over.json())["error"]["code"] == "too_many_feeds"
            missing = await http.get(url)
            assert missing.status == 400
            for response in opened[1:]:
                response.close()
            await eventually(lambda: len(api.feeds) == 1)
            # the one left does not read while many more than its queue holds are sent
            for n in range(QUEUE_SIZE * 3):
                await api.send(_unasked("alice", f"item {n}"))
            got = await _items(opened[0], QUEUE_SIZE)
            assert [g["content"] for g in got][-1] == f"item {QUEUE_SIZE * 3 - 1}"
            assert got[0]["content"] != "item 0"  # the oldest went
            opened[0].close()


async def test_a_stopping_gateway_ends_every_feed(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        api = gw.adapters["api"]
        assert isinstance(api, ApiAdapter)
        async with aiohttp.ClientSession() as http:
            feed = await http.get(f"{client.base}/v1/events", params={"user": "alice"})
            await eventually(lambda: len(api.feeds) == 1)
            await api.close()
            lines = (await asyncio.wait_for(feed.read(), 10)).decode()
            assert "event: closing" in lines
            feed.close()
