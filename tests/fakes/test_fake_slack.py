"""Drives the real slack-bolt AsyncApp and slack-sdk clients against FakeSlack (no mocks).

Covers Socket Mode (events, acks, reconnects, retries), the Web API methods and HTTP mode.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.server import async_wait_until
from tests.fakes.slack import FakeSlack, make_message_event, make_url_verification, sign_request

# The SDK's ping interval is also its reconnect check tick: short, so drop_socket() heals fast.
PING_INTERVAL = 0.5


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def web_client(fake: FakeSlack, **kwargs: Any) -> AsyncWebClient:
    return AsyncWebClient(token=fake.bot_token, base_url=fake.api_base, **kwargs)


@pytest.fixture
def app(fake: FakeSlack) -> AsyncApp:
    return AsyncApp(client=web_client(fake))


@pytest.fixture
async def socket(fake: FakeSlack, app: AsyncApp) -> AsyncIterator[AsyncSocketModeHandler]:
    handler = AsyncSocketModeHandler(app, app_token=fake.app_token, ping_interval=PING_INTERVAL)
    await handler.connect_async()  # never start_async(): it blocks forever
    await async_wait_until(lambda: fake.connected)
    yield handler
    await handler.close_async()


def record_texts(app: AsyncApp) -> list[str]:
    """Register a message listener; returns the list it appends each event's text to."""
    texts: list[str] = []

    @app.event("message")
    async def on_message(event: dict[str, Any]) -> None:
        texts.append(event["text"])

    return texts


async def slack_error(call: Any) -> SlackApiError:
    with pytest.raises(SlackApiError) as info:
        await call
    return info.value


# -- Socket Mode -----------------------------------------------------------------------------


async def test_dm_reaches_listener_is_acked_and_say_posts(
    fake: FakeSlack, app: AsyncApp, socket: AsyncSocketModeHandler
) -> None:
    seen: list[dict[str, Any]] = []

    @app.event("message")
    async def on_message(event: dict[str, Any], say: Any) -> None:
        seen.append(event)
        await say(f"echo: {event['text']}")

    payload = fake.send_message(text="hello", user="U123", channel="D123")
    await async_wait_until(lambda: fake.messages_in("D123") and fake.acks)

    assert payload["event_id"].startswith("Ev")
    assert payload["authorizations"][0]["user_id"] == "U0BOT"
    assert seen[0]["ts"] == payload["event"]["ts"]
    assert seen[0]["channel_type"] == "im"
    assert seen[0]["client_msg_id"]
    reply = fake.posted[0]
    assert (reply["channel"], reply["text"], reply.get("thread_ts")) == (
        "D123",
        "echo: hello",
        None,
    )
    assert float(reply["ts"]) > float(payload["event"]["ts"])
    envelope_id, seconds = fake.acks[0]
    assert envelope_id == fake.envelopes[0]["envelope_id"]
    assert fake.envelopes[0]["payload"]["event_id"] == payload["event_id"]
    assert seconds < 1.0  # Slack wants the ack within 3 s
    methods = [method for method, _ in fake.calls]
    assert methods == ["apps.connections.open", "auth.test", "chat.postMessage"]


async def test_say_in_thread(
    fake: FakeSlack, app: AsyncApp, socket: AsyncSocketModeHandler
) -> None:
    @app.event("message")
    async def on_message(event: dict[str, Any], say: Any) -> None:
        await say("in the thread", thread_ts=event.get("thread_ts") or event["ts"])

    payload = fake.send_message(text="question", channel="C123")
    ts = payload["event"]["ts"]
    await async_wait_until(lambda: fake.messages_in("C123", thread_ts=ts))

    assert payload["event"]["channel_type"] == "channel"
    assert fake.messages_in("C123", thread_ts=ts)[0]["text"] == "in the thread"
    assert fake.messages_in("C123", thread_ts="1.000000") == []
    assert fake.messages_in("D123") == []


async def test_mention_sends_app_mention_and_message_with_one_ts(
    fake: FakeSlack, app: AsyncApp, socket: AsyncSocketModeHandler
) -> None:
    mentions: list[dict[str, Any]] = []
    messages = record_texts(app)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any]) -> None:
        mentions.append(event)

    payload = fake.send_mention(text="<@U0BOT> ping", channel="C777")
    await async_wait_until(lambda: mentions and messages)

    assert mentions[0]["ts"] == payload["event"]["ts"]
    assert (mentions[0]["channel"], mentions[0]["text"]) == ("C777", "<@U0BOT> ping")
    assert messages == ["<@U0BOT> ping"]
    events = [envelope["payload"]["event"] for envelope in fake.envelopes]
    assert [event["type"] for event in events] == ["app_mention", "message"]
    assert events[0]["ts"] == events[1]["ts"]
    assert events[0]["client_msg_id"] == events[1]["client_msg_id"]


async def test_bolt_ignores_the_bots_own_message(
    fake: FakeSlack, app: AsyncApp, socket: AsyncSocketModeHandler
) -> None:
    texts = record_texts(app)

    own = fake.send_message(text="from the bot", user="U0BOT", bot_id="B0BOT")
    fake.send_message(text="from a person")
    await async_wait_until(lambda: len(fake.acks) == 2 and texts)

    assert texts == ["from a person"]
    assert "client_msg_id" not in own["event"]
    assert own["event"]["bot_id"] == "B0BOT"
    # Bolt's self-event filter compares against what auth.test said.
    assert fake.calls_to("auth.test")


async def test_disconnect_makes_the_sdk_reconnect_and_queued_events_follow(
    fake: FakeSlack, app: AsyncApp, socket: AsyncSocketModeHandler
) -> None:
    texts = record_texts(app)
    fake.send_message(text="before")
    await async_wait_until(lambda: texts == ["before"])

    fake.disconnect()
    assert not fake.connected
    fake.send_message(text="after")  # no socket takes it yet: it waits for the next one
    await async_wait_until(lambda: texts == ["before", "after"])

    assert fake.connections == 2
    assert len(fake.calls_to("apps.connections.open")) == 2
    assert len(fake.envelopes) == 2


async def test_dropped_socket_reconnects(
    fake: FakeSlack, app: AsyncApp, socket: AsyncSocketModeHandler
) -> None:
    texts = record_texts(app)

    fake.drop_socket()
    fake.send_message(text="after the drop")
    await async_wait_until(lambda: texts == ["after the drop"], timeout=5)

    assert fake.connections == 2
    assert len(fake.calls_to("apps.connections.open")) == 2


async def test_retried_event_carries_the_retry_fields(
    fake: FakeSlack, app: AsyncApp, socket: AsyncSocketModeHandler
) -> None:
    seen: list[tuple[str, Any, Any]] = []

    @app.event("message")
    async def on_message(body: dict[str, Any], request: AsyncBoltRequest) -> None:
        headers = request.headers  # bolt mirrors the envelope's retry fields as HTTP headers
        seen.append(
            (body["event_id"], headers["x-slack-retry-num"], headers["x-slack-retry-reason"])
        )

    first = fake.send_message(text="once")
    retry = fake.send_event(first["event"], event_id=first["event_id"], retry_attempt=1)
    await async_wait_until(lambda: len(seen) == 2)

    assert retry["event_id"] == first["event_id"]
    retry_fields = [(e["retry_attempt"], e["retry_reason"]) for e in fake.envelopes]
    assert retry_fields == [(0, ""), (1, "timeout")]
    event_id = first["event_id"]
    assert sorted(seen) == [(event_id, ["0"], [""]), (event_id, ["1"], ["timeout"])]


async def test_hello_first_then_events_sent_before_any_socket(
    fake: FakeSlack, app: AsyncApp
) -> None:
    texts = record_texts(app)
    fake.send_message(text="early")
    assert fake.envelopes == []
    frames: list[str] = []

    async def on_frame(client: Any, message: dict[str, Any], raw: str | None) -> None:
        frames.append(message.get("type", ""))  # a gateway would mark itself ready on "hello"

    handler = AsyncSocketModeHandler(app, app_token=fake.app_token, ping_interval=PING_INTERVAL)
    handler.client.message_listeners.append(on_frame)
    await handler.connect_async()
    try:
        await async_wait_until(lambda: texts == ["early"] and fake.acks)
    finally:
        await handler.close_async()
    assert frames == ["hello", "events_api"]
    assert fake.connections == 1


async def test_stop_closes_live_sockets_quickly(
    fake: FakeSlack, socket: AsyncSocketModeHandler
) -> None:
    started = time.monotonic()
    await asyncio.to_thread(fake.stop)
    # The close handshake takes milliseconds; without on_shutdown closing the sockets, aiohttp's
    # graceful shutdown waits out the handlers (about 0.75 s).
    assert time.monotonic() - started < 0.3
    assert not fake.connected


async def test_socket_mode_needs_the_app_token(fake: FakeSlack) -> None:
    client = web_client(fake)
    error = await slack_error(client.apps_connections_open(app_token=fake.bot_token))
    assert error.response["error"] == "invalid_auth"
    opened = await client.apps_connections_open(app_token=fake.app_token)
    assert opened["url"].startswith(f"ws://127.0.0.1:{fake.port}/link/?ticket=")


# -- Web API ---------------------------------------------------------------------------------


async def test_reactions_add_and_remove(fake: FakeSlack) -> None:
    client = web_client(fake)
    ts = fake.send_message(text="react to me", channel="D9")["event"]["ts"]  # queued, but known
    item = {"channel": "D9", "timestamp": ts, "name": "eyes"}

    await client.reactions_add(**item)
    assert (await slack_error(client.reactions_add(**item))).response["error"] == "already_reacted"
    await client.reactions_remove(**item)
    assert (await slack_error(client.reactions_remove(**item))).response["error"] == "no_reaction"
    unknown = client.reactions_add(channel="D9", timestamp="1.000001", name="eyes")
    assert (await slack_error(unknown)).response["error"] == "message_not_found"

    assert fake.reactions == [("add", "D9", ts, "eyes"), ("remove", "D9", ts, "eyes")]


async def test_chat_update_and_delete_apply_to_posted(fake: FakeSlack) -> None:
    client = web_client(fake)
    first = await client.chat_postMessage(channel="C1", text="draft", mrkdwn=True)
    second = await client.chat_postMessage(channel="C1", text="x", thread_ts=first["ts"])
    assert float(second["ts"]) > float(first["ts"])

    updated = await client.chat_update(channel="C1", ts=first["ts"], text="final")
    assert updated["text"] == "final"
    assert fake.posted[0]["text"] == "final"
    assert fake.posted[0]["history"] == ["draft"]
    assert fake.posted[0]["mrkdwn"] is True
    missing = client.chat_update(channel="C1", ts="1.000001", text="nope")
    assert (await slack_error(missing)).response["error"] == "message_not_found"

    await client.chat_delete(channel="C1", ts=second["ts"])
    assert [m["text"] for m in fake.messages_in("C1")] == ["final"]
    assert fake.posted[1]["deleted"] is True


async def test_post_message_limits_and_blocks(fake: FakeSlack) -> None:
    client = web_client(fake)
    await client.chat_postMessage(channel="C1", text="a" * 40_000)
    too_long = client.chat_postMessage(channel="C1", text="a" * 40_001)
    assert (await slack_error(too_long)).response["error"] == "msg_too_long"
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}]
    await client.chat_postMessage(channel="C1", text="hi", blocks=blocks)
    assert fake.posted[-1]["blocks"] == blocks
    assert len(fake.posted) == 2


async def test_auth_and_unknown_methods(fake: FakeSlack) -> None:
    auth = await web_client(fake).auth_test()
    assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == ("U0BOT", "B0BOT", "T0TEAM")
    wrong = AsyncWebClient(token="xoxb-wrong", base_url=fake.api_base)
    assert (await slack_error(wrong.auth_test())).response["error"] == "invalid_auth"
    app_token = AsyncWebClient(token=fake.app_token, base_url=fake.api_base)
    denied = app_token.chat_postMessage(channel="C1", text="x")
    assert (await slack_error(denied)).response["error"] == "invalid_auth"
    unknown = web_client(fake).api_call("nope.nothing")
    assert (await slack_error(unknown)).response["error"] == "unknown_method"
    assert fake.posted == []


async def test_info_methods_and_file_download(fake: FakeSlack) -> None:
    client = web_client(fake)
    assert (await client.conversations_info(channel="D5"))["channel"]["is_im"] is True
    assert (await client.conversations_info(channel="C5"))["channel"]["is_channel"] is True
    fake.users["U7"] = {"real_name": "Ada Lovelace"}
    assert (await client.users_info(user="U7"))["user"]["real_name"] == "Ada Lovelace"
    await client.assistant_threads_setStatus(channel_id="D5", thread_ts="1.1", status="thinking")
    assert fake.calls_to("assistant.threads.setStatus")[0]["status"] == "thinking"

    file = fake.add_file("notes.txt", b"file body")
    assert (await client.files_info(file=file["id"]))["file"]["name"] == "notes.txt"
    missing = client.files_info(file="F404")
    assert (await slack_error(missing)).response["error"] == "file_not_found"
    async with aiohttp.ClientSession() as session:
        bearer = {"Authorization": f"Bearer {fake.bot_token}"}
        async with session.get(file["url_private"], headers=bearer) as resp:
            assert await resp.read() == b"file body"
        async with session.get(file["url_private"]) as resp:
            assert resp.status == 401
        async with session.get(file["url_private"], headers={"Authorization": "Bearer x"}) as resp:
            assert resp.status == 403
        fake.signin_page = True  # what Slack itself answers: its sign-in page, status 200
        async with session.get(file["url_private"]) as resp:
            assert (resp.status, resp.content_type) == (200, "text/html")
    assert [(d["authorization"], d["status"]) for d in fake.downloads] == [
        (f"Bearer {fake.bot_token}", 200),
        (None, 401),
        ("Bearer x", 403),
        (None, 200),
    ]


async def test_rate_limit_retried_by_the_sdk_handler(fake: FakeSlack) -> None:
    fake.fail_next("chat.postMessage", status=429, retry_after=0)
    handler = AsyncRateLimitErrorRetryHandler(max_retry_count=1)
    client = web_client(fake, retry_handlers=[handler])

    response = await client.chat_postMessage(channel="C1", text="after the 429")

    assert response["ok"] is True
    assert len(fake.calls_to("chat.postMessage")) == 2
    assert [m["text"] for m in fake.posted] == ["after the 429"]


async def test_injected_failures(fake: FakeSlack) -> None:
    client = web_client(fake)
    fake.fail_next("chat.postMessage", status=429, retry_after=7)
    error = await slack_error(client.chat_postMessage(channel="C1", text="x"))
    assert (error.response.status_code, error.response["error"]) == (429, "ratelimited")
    assert error.response.headers["Retry-After"] == "7"

    fake.fail_next("chat.postMessage", status=200, error="channel_not_found")
    fake.fail_next("chat.postMessage", status=503, times=2)
    error = await slack_error(client.chat_postMessage(channel="C1", text="x"))
    assert (error.response.status_code, error.response["error"]) == (200, "channel_not_found")
    for _ in range(2):
        error = await slack_error(client.chat_postMessage(channel="C1", text="x"))
        assert error.response.status_code == 503
    await client.chat_postMessage(channel="C1", text="finally")
    assert [m["text"] for m in fake.posted] == ["finally"]


# -- HTTP (Events API) mode ------------------------------------------------------------------


@pytest.fixture
async def http_app(fake: FakeSlack) -> AsyncIterator[tuple[AsyncApp, str]]:
    app = AsyncApp(client=web_client(fake), signing_secret="s3cret")
    runner = web.AppRunner(app.web_app(path="/slack/events"))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    yield app, f"http://127.0.0.1:{port}/slack/events"
    await runner.cleanup()


def test_sign_request_matches_the_sdk_verifier() -> None:
    body, now = b'{"type":"event_callback"}', int(time.time())
    headers = sign_request("s3cret", body, now)
    verifier = SignatureVerifier("s3cret")
    assert verifier.is_valid(
        body, headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
    )
    assert not SignatureVerifier("other").is_valid(body, str(now), headers["X-Slack-Signature"])


async def test_http_url_verification(fake: FakeSlack, http_app: tuple[AsyncApp, str]) -> None:
    _, url = http_app
    # post_event blocks; the app is served by this loop, so call it from a worker thread.
    status, body = await asyncio.to_thread(fake.post_event, url, make_url_verification("abc123"))
    assert (status, json.loads(body)) == (200, {"challenge": "abc123"})


async def test_http_signed_event_reaches_the_listener(
    fake: FakeSlack, http_app: tuple[AsyncApp, str]
) -> None:
    app, url = http_app

    @app.event("message")
    async def on_message(event: dict[str, Any], say: Any) -> None:
        await say(f"got {event['text']}")

    event = make_message_event("over http", "U123", "D42", fake.next_ts())
    status, body = await fake.post_event_async(url, event)

    assert (status, body) == (200, "")
    await async_wait_until(lambda: fake.messages_in("D42"))
    assert fake.messages_in("D42")[0]["text"] == "got over http"


async def test_http_rejects_bad_signatures(fake: FakeSlack, http_app: tuple[AsyncApp, str]) -> None:
    app, url = http_app
    texts = record_texts(app)
    event = make_message_event("forged", "U123", "D42", fake.next_ts())
    ten_minutes_ago = int(time.time()) - 600

    wrong_secret = await fake.post_event_async(url, event, signing_secret="not-it")
    garbled = await fake.post_event_async(url, event, bad_signature=True)
    stale = await fake.post_event_async(url, event, timestamp=ten_minutes_ago)

    assert [wrong_secret[0], garbled[0], stale[0]] == [401, 401, 401]
    assert (await fake.post_event_async(url, event))[0] == 200  # the same event, signed right
    await async_wait_until(lambda: texts)
    assert texts == ["forged"]


class MuteHandler(AsyncSocketModeHandler):
    """Takes every envelope and never acks it, as a frozen process does."""

    taken: list[tuple[str, int]]

    async def handle(self, client: Any, req: Any) -> None:
        self.taken.append((req.payload["event"]["text"], req.retry_attempt or 0))


async def test_events_are_spread_over_sockets_and_an_unacked_one_comes_again(
    fake: FakeSlack,
) -> None:
    """Two connections of one app (two instances): each event goes to one of them, in turn;
    what the first took and never acked (then it died) comes again, with retry_attempt 1, to
    the other; what the other acked does not."""
    fake.redeliver_after_s = 1.0
    mute = MuteHandler(AsyncApp(client=web_client(fake)), app_token=fake.app_token)
    mute.taken = []
    app = AsyncApp(client=web_client(fake))
    texts = record_texts(app)
    live = AsyncSocketModeHandler(app, app_token=fake.app_token, ping_interval=PING_INTERVAL)
    await mute.connect_async()
    await async_wait_until(lambda: fake.live_connections == 1)
    await live.connect_async()
    await async_wait_until(lambda: fake.live_connections == 2)
    try:
        for i in range(4):
            fake.send_message(text=f"m{i}", channel="D123")
        await async_wait_until(lambda: len(mute.taken) == 2 and len(texts) == 2)
        await mute.close_async()  # it dies with two envelopes unacked
        await async_wait_until(lambda: len(texts) == 4, timeout=10)
        await asyncio.sleep(1.5)  # what was acked does not come again
    finally:
        await live.close_async()
    assert sorted(t for t, _ in mute.taken) == ["m0", "m2"]  # in turn: every other event
    assert sorted(texts) == ["m0", "m1", "m2", "m3"]
    retried = [e for e in fake.envelopes if e["retry_attempt"]]
    assert sorted(e["payload"]["event"]["text"] for e in retried) == ["m0", "m2"]
    assert all(e["retry_attempt"] == 1 and e["retry_reason"] == "timeout" for e in retried)
    assert {fake.delivered_on[e["envelope_id"]] for e in retried} == {2}
    assert fake.peak_connections == 2
