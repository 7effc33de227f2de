"""The Slack adapter over Socket Mode: real slack-bolt against `FakeSlack`, the gateway in the
test's loop and the fake LLM. Intake: DMs, mentions, threads, dedupe, ignoring, access, files.

Also holds the helpers the other Slack test files import (`slack_config`, `started`, ...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.config import Config
from hermes_gateway.errors import AdapterAuthError
from hermes_gateway.server import Gateway
from tests.e2e.daemon import free_port
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.slack import FakeSlack
from tests.harness import Client, eventually, make_config, running_gateway

ALICE = "U123"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def slack_config(
    tmp_path: Path, llm: FakeOpenAI, fake: FakeSlack, *, sections: Any = None, **slack: Any
) -> Config:
    """Socket Mode against ``fake``, ALICE allowed, a short ping so dead sockets heal fast."""
    section = {
        "enabled": True,
        "bot_token": fake.bot_token,
        "app_token": fake.app_token,
        "api_base": fake.api_base,
        "allowed_users": [ALICE],
        "ping_interval_s": 0.2,
        **slack,
    }
    return make_config(tmp_path, llm.base_url, platforms={"slack": section}, **(sections or {}))


@asynccontextmanager
async def started(config: Config) -> AsyncIterator[tuple[Gateway, Client]]:
    """A running gateway whose Slack adapter is connected."""
    async with running_gateway(config) as (gw, client):
        await eventually(lambda: gw.adapters["slack"].health().ready)
        yield gw, client


def texts(fake: FakeSlack, channel: str, thread_ts: str | None = None) -> list[str]:
    return [m["text"] for m in fake.messages_in(channel, thread_ts)]


async def answered(fake: FakeSlack, channel: str, count: int = 1, **kw: Any) -> list[str]:
    """Wait for ``count`` bot messages in ``channel`` (or a thread of it); returns their texts."""
    await eventually(lambda: len(fake.messages_in(channel, **kw)) >= count)
    return texts(fake, channel, **kw)


async def sentinel(fake: FakeSlack, llm: FakeOpenAI, before: int) -> None:
    """A DM after the events under test, answered: anything they would have caused (a reply,
    a model call) came first, since intake of each event starts right after its ack."""
    fake.send_message("sentinel", channel="D999")
    await answered(fake, "D999")
    assert texts(fake, "D999") == ["echo: sentinel"]
    assert len(llm.requests) == before + 1


def accepted(gw: Gateway) -> float:
    """Slack messages the gateway accepted into the inbox (duplicates are not counted)."""
    return float(gw.metrics.received.labels("slack")._value.get())


def user_texts(llm: FakeOpenAI) -> list[str]:
    return [r["messages"][-1]["content"] for r in llm.requests]


# -- DMs, channels, threads ------------------------------------------------------------------


async def test_dm_is_acked_before_the_slow_model_answers(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.push(text("hello back", delay=0.8))
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        payload = slack.send_message("hello", channel="D1")
        await eventually(lambda: slack.acks)
        assert slack.acks[0][1] < 0.5  # acked long before the 0.8 s model answer
        assert slack.messages_in("D1") == []
        assert await answered(slack, "D1") == ["hello back"]
        status, ready = await client.get("/readyz")
    reply = slack.messages_in("D1")[0]
    assert reply.get("thread_ts") is None  # a DM is answered in the DM itself
    assert reply["mrkdwn"] is True
    assert user_texts(fake_llm) == ["hello"]
    assert payload["event"]["ts"] != reply["ts"]
    assert (status, ready["ready"]) == (200, True)


async def test_channel_mention_is_answered_once_in_a_thread_under_it(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        ts = slack.send_mention("<@U0BOT>  what's up?", channel="C1")["event"]["ts"]
        assert await answered(slack, "C1", thread_ts=ts) == ["echo: what's up?"]
        await sentinel(slack, fake_llm, before=1)
        assert accepted(gw) == 2  # the pair is one message
    assert len(slack.acks) == 3  # app_mention + message + the sentinel, all acked
    assert user_texts(fake_llm)[0] == "what's up?"  # the mention is stripped
    assert len(slack.messages_in("C1")) == 1


async def test_plain_channel_message_without_mention_is_ignored(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        slack.send_message("just chatting among humans", channel="C1")
        await sentinel(slack, fake_llm, before=0)
    assert slack.messages_in("C1") == []


async def test_without_require_mention_a_channel_message_is_answered_in_its_thread(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    config = slack_config(tmp_path, fake_llm, slack, require_mention=False)
    async with started(config) as (gw, client):
        ts = slack.send_message("anyone?", channel="C1")["event"]["ts"]
        assert await answered(slack, "C1", thread_ts=ts) == ["echo: anyone?"]


async def test_thread_replies_stay_in_the_thread_the_bot_follows(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        top = slack.send_mention("<@U0BOT> first", channel="C1")["event"]["ts"]
        await answered(slack, "C1", thread_ts=top)
        # the bot answers in this thread now: a follow-up needs no mention
        slack.send_message("second", channel="C1", thread_ts=top)
        assert await answered(slack, "C1", 2, thread_ts=top) == ["echo: first", "echo: second"]
        # someone else's thread: a plain reply is ignored, a mention is answered there
        other = slack.send_message("humans talking", channel="C1")["event"]["ts"]
        slack.send_message("still humans", channel="C1", thread_ts=other)
        slack.send_mention("<@U0BOT> join us", channel="C1", thread_ts=other)
        assert await answered(slack, "C1", thread_ts=other) == ["echo: join us"]
        await sentinel(slack, fake_llm, before=3)
    assert len(slack.messages_in("C1")) == 3
    # the thread is one session: the second turn saw the first
    second = [m["content"] for m in fake_llm.requests[1]["messages"][1:]]
    assert second == ["first", "echo: first", "second"]


async def test_a_thread_followed_before_a_restart_is_still_followed(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    config = slack_config(tmp_path, fake_llm, slack)
    async with started(config) as (gw, client):
        top = slack.send_mention("<@U0BOT> remember me", channel="C1")["event"]["ts"]
        await answered(slack, "C1", thread_ts=top)
    async with started(config) as (gw, client):  # same home: the thread's history is kept
        slack.send_message("still there?", channel="C1", thread_ts=top)
        assert await answered(slack, "C1", 2, thread_ts=top) == [
            "echo: remember me",
            "echo: still there?",
        ]


# -- deduplication -----------------------------------------------------------------------------


async def test_a_retried_event_is_processed_once(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        first = slack.send_message("only once", channel="D1")
        slack.send_event(first["event"], event_id=first["event_id"], retry_attempt=1)
        await answered(slack, "D1")
        await sentinel(slack, fake_llm, before=1)
        assert accepted(gw) == 2
    assert texts(slack, "D1") == ["echo: only once"]
    assert [e["retry_attempt"] for e in slack.envelopes[:2]] == [0, 1]


async def test_a_redelivery_after_a_restart_is_folded_by_the_inbox(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    config = slack_config(tmp_path, fake_llm, slack)
    async with started(config) as (gw, client):
        first = slack.send_message("answer me once", channel="D1")
        await answered(slack, "D1")
    async with started(config) as (gw, client):  # a new process: nothing seen in memory
        slack.send_event(first["event"], event_id=first["event_id"], retry_attempt=2)
        await sentinel(slack, fake_llm, before=1)
        duplicates = gw.metrics.duplicates.labels("slack")._value.get()
    assert texts(slack, "D1") == ["echo: answer me once"]
    assert duplicates == 1


# -- ignored senders and payloads ------------------------------------------------------------


async def test_own_bot_and_unhandled_messages_are_ignored_and_odd_payloads_survive(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    config = slack_config(tmp_path, fake_llm, slack, allowed_users=[ALICE, "U0BOT", "U777"])
    async with started(config) as (gw, client):
        slack.send_message("from me", user="U0BOT", bot_id="B0BOT", channel="D1")
        slack.send_message("from another bot", user="U777", bot_id="B777", channel="D1")
        slack.send_message("edited", channel="D1", subtype="message_changed")
        slack.send_message("<@U123> has joined", channel="C1", subtype="channel_join")
        slack.send_message("", channel="D1")  # nothing to answer
        slack.send_event({"type": "message"})  # no channel, ts or user
        slack.send_event({"type": "message", "channel": 7, "ts": None, "user": ["x"]})
        slack.send_event({"type": "app_mention", "text": None, "channel": "C1", "ts": "1.2"})
        slack.send_event({"type": "reaction_added", "user": ALICE, "reaction": "eyes"})
        garbage = {"type": "event_callback", "event": "not an object", "event_id": "Ev0"}
        slack.send_envelope(garbage)
        slack.send_envelope({"type": "event_callback"})
        slack.send_envelope({"command": "/hermes"}, type="slash_commands")
        await eventually(lambda: len(slack.acks) == 12)
        await sentinel(slack, fake_llm, before=0)
    assert slack.messages_in("D1") == [] and slack.messages_in("C1") == []


async def test_unknown_users_get_silence_or_a_pairing_code(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    config = slack_config(tmp_path, fake_llm, slack, pairing=True)
    async with started(config) as (gw, client):
        slack.send_mention("<@U0BOT> hi", user="U404", channel="C1")  # channels: silence
        slack.send_message("let me in", user="U404", channel="D404")
        [reply] = await answered(slack, "D404")
        await sentinel(slack, fake_llm, before=0)
    assert "hermes pairing approve slack " in reply
    assert slack.messages_in("C1") == []


async def test_files_become_attachments(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    received: list[Any] = []
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        gw.bus.subscribe(lambda ev: received.append(ev.message), ["message_received"])
        file = slack.add_file("notes.txt", b"buy milk", "text/plain")
        slack.send_message("see attached", channel="D1", files=[file])
        await answered(slack, "D1")
        await eventually(lambda: received)
    [attachment] = received[0].attachments
    assert (attachment.kind, attachment.name, attachment.mime_type) == (
        "document",
        "notes.txt",
        "text/plain",
    )
    assert (attachment.file_id, attachment.size) == (file["id"], 8)
    assert attachment.url.startswith(file["url_private"])
    assert user_texts(fake_llm) == ["see attached\n[attached file: notes.txt (text/plain)]"]


# -- start, tokens, connection -----------------------------------------------------------------


async def test_api_base_without_trailing_slash_works(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    config = slack_config(tmp_path, fake_llm, slack, api_base=slack.api_base.rstrip("/"))
    async with started(config) as (gw, client):
        slack.send_message("slash?", channel="D1")
        assert await answered(slack, "D1") == ["echo: slash?"]


@pytest.mark.parametrize("token", ["bot_token", "app_token"])
async def test_a_rejected_token_is_an_auth_error_at_start(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack, token: str
) -> None:
    gw = Gateway(slack_config(tmp_path, fake_llm, slack, **{token: "xoxb-revoked"}))
    try:
        with pytest.raises(AdapterAuthError, match="invalid_auth"):
            await gw.startup()
    finally:
        await gw.shutdown()


async def test_network_errors_at_start_are_retried_while_healthz_serves(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    port = free_port()  # nothing listens there yet: connections are refused
    config = slack_config(tmp_path, fake_llm, FakeSlack(), api_base=f"http://127.0.0.1:{port}/api/")
    async with running_gateway(config) as (gw, client):
        assert (await client.get("/healthz"))[0] == 200
        status, body = await client.get("/readyz")
        assert status == 503
        assert any(r.startswith("slack: connecting (last error:") for r in body["reasons"])
        with FakeSlack(port=port) as back:
            await eventually(lambda: gw.adapters["slack"].health().ready, timeout=10)
            back.send_message("made it", channel="D1")
            assert await answered(back, "D1") == ["echo: made it"]


async def test_disconnect_reconnects_and_the_next_message_is_answered(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        slack.disconnect()
        slack.send_message("after the refresh", channel="D1")
        assert await answered(slack, "D1") == ["echo: after the refresh"]
        await eventually(lambda: gw.adapters["slack"].health().ready)
    assert slack.connections == 2


async def test_readyz_is_false_while_the_socket_is_down(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async with started(slack_config(tmp_path, fake_llm, slack)) as (gw, client):
        slack.fail_next("apps.connections.open", status=503, times=3)  # reconnects fail a while
        slack.drop_socket()
        down = time.monotonic()
        status, body = await _readyz_when(client, 503)
        assert "slack: socket disconnected; reconnecting" in body["reasons"]
        await _readyz_when(client, 200)
        assert time.monotonic() - down < 5
        slack.send_message("back again", channel="D1")
        assert await answered(slack, "D1") == ["echo: back again"]
    assert slack.connections == 2


async def _readyz_when(client: Client, status: int) -> tuple[int, Any]:
    async def check() -> tuple[int, Any] | None:
        got = await client.get("/readyz")
        return got if got[0] == status else None

    deadline = time.monotonic() + 10
    while (got := await check()) is None:
        assert time.monotonic() < deadline, f"/readyz never answered {status}"
        await asyncio.sleep(0.01)
    return got
