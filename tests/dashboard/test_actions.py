"""The Inbox page's actions go through the quarantine routes' own logic: a retry answers the
message, a drop discards it, and the page's stream shows the list shrink."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import aiohttp

from hermes_gateway.dashboard import views
from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Store
from tests.fakes.openai import FakeOpenAI, hang
from tests.harness import eventually, make_config, running_gateway


async def _quarantine(store_url: str, *texts: str) -> list[int]:
    store = Store(store_url)
    await store.open()
    ids = []
    for n, text in enumerate(texts):
        event = MessageEvent.create(
            platform="api",
            chat_type="dm",
            chat_id=f"user{n}",
            user_id=f"user{n}",
            message_id=f"m{n}",
            text=text,
            user_name=f"user{n}",
        )
        inbox_id = await store.accept(event)
        assert inbox_id is not None
        ids.append(inbox_id)
    for _ in range(2):  # two crashes, each time on probation
        await store.begin_attempt(ids, probation=True)
        held = await store.quarantine(2, 3600)
    assert len(held) == len(ids)
    await store.close()
    return ids


class Stream:
    """One open event stream, read event by event."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp

    async def next(self, wanted: str) -> Any:
        name = ""
        async for raw in self.resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name == wanted:
                return json.loads(line[6:])
        raise AssertionError(f"the stream ended before a {wanted!r} event")


async def test_retry_and_drop_from_the_inbox_page(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, dashboard={"push_interval_s": 0.1})
    keep, discard = await _quarantine(config.store_url, "try me again", "forget me")
    async with running_gateway(config) as (gw, client):
        await client.dashboard_login()  # the dashboard wants the control token
        base = f"{client.base}/dashboard"
        async with client.http.get(f"{base}/events/inbox") as resp:
            stream = Stream(resp)
            csrf = (await stream.next("hello"))["csrf"]
            listed = await stream.next("inbox")
            assert [(q["id"], q["text"]) for q in listed["quarantined"]] == [
                (keep, "try me again"),
                (discard, "forget me"),
            ]
            headers = {"X-CSRF-Token": csrf}
            async with client.http.post(f"{base}/api/inbox/{keep}/retry", headers=headers) as r:
                assert r.status == 200
            async with client.http.post(f"{base}/api/inbox/{discard}/drop", headers=headers) as r:
                assert r.status == 200
            async with client.http.post(f"{base}/api/inbox/{discard}/drop", headers=headers) as r:
                assert r.status == 404  # not held any more: the route's own answer
            while (await asyncio.wait_for(stream.next("inbox"), 10))["quarantined"]:
                pass
        assert gw.inbox.summaries() == []

        async def answered() -> bool:
            history = await client.history(user="user0")
            return any(m["content"] == "echo: try me again" for m in history)

        for _ in range(300):
            if await answered():
                break
            await asyncio.sleep(0.05)
        assert await answered()
        assert await client.history(user="user1") == []
        await eventually(lambda: len(fake_llm.requests) == 1)


def _event(platform: str, n: int, text: str) -> MessageEvent:
    return MessageEvent.create(
        platform=platform,
        chat_type="dm",
        chat_id=f"c{n}",
        user_id=f"u{n}",
        message_id=f"w{n}",
        text=text,
        user_name=f"<i>user{n}</i>",
    )


async def test_the_inbox_lists_undeliverable_and_waiting_messages(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: Any
) -> None:
    monkeypatch.setattr(views, "WAITING_AFTER_S", 0.0)  # no entry needs to age here
    config = make_config(tmp_path, fake_llm.base_url, dashboard={"push_interval_s": 0.1})
    store = Store(config.store_url)
    await store.open()
    # telegram is not enabled here: the replay leaves its entries waiting
    lost = await store.accept(_event("telegram", 1, "you <b>blocked</b> me"))
    to_send = await store.accept(_event("telegram", 2, "answered, not sent"))
    to_run = await store.accept(_event("telegram", 3, "not answered yet"))
    assert lost and to_send and to_run
    await store.mark([lost], "undeliverable", "a reply nobody got")
    await store.mark([to_send], "done", "a reply to send")
    await store.close()
    fake_llm.push(hang(30))
    async with running_gateway(config) as (gw, client):
        await client.dashboard_login()  # the dashboard wants the control token
        running = asyncio.create_task(client.chat("think hard", user="bob"))
        await eventually(lambda: "api:dm:bob" in gw.runner.session_keys())
        base = f"{client.base}/dashboard"
        async with client.http.get(f"{base}/events/inbox") as resp:
            stream = Stream(resp)
            listed = await stream.next("inbox")
        assert listed["error"] is None and listed["quarantined"] == []
        [entry] = listed["undeliverable"]
        assert (entry["id"], entry["text"], entry["reply"]) == (
            lost,
            "you <b>blocked</b> me",
            "a reply nobody got",
        )
        assert entry["user_name"] == "<i>user1</i>" and entry["platform"] == "telegram"
        # bob's message is being answered: it is not waiting
        assert sorted((e["id"], e["status"]) for e in listed["waiting"]) == [
            (to_send, "done"),
            (to_run, "accepted"),
        ]
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
