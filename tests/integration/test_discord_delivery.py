"""Discord delivery details: typing while the agent works, streaming previews that end in exactly
one message, retries of 5xx and no retries of permanent errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import discord
import pytest

from adapters.discord.outbound import translate
from hermes_gateway.errors import (
    AdapterAuthError,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import make_error
from tests.fakes.openai import FakeOpenAI, text
from tests.harness import eventually
from tests.integration.test_discord_kit import (
    ALICE,
    BOB,
    CHANNEL_ID,
    answered,
    asked,
    bot_posts,
    discord_config,
    discord_gateway,
    fake_discord,
    referenced_id,
)

POSTS = r"^/channels/\d+/messages$"


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        yield fake


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def posts_made(fake: FakeDiscord) -> int:
    return sum(1 for method, path in fake.requests if method == "POST" and "/messages" in path)


async def test_typing_is_shown_while_the_model_works_and_stops_after(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    fake_llm.push(text("done thinking", delay=0.6))
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (
        _gw,
        _client,
        adapter,
    ):
        dm = fake.send_dm("think hard", user_id=ALICE)
        await eventually(lambda: fake.typing)
        typing_before_reply = not fake.sent
        (reply,) = await answered(fake, 1)
        assert adapter.indicator is not None
        await eventually(lambda: adapter.indicator is not None and adapter.indicator.active == 0)
    assert typing_before_reply
    assert set(fake.typing) == {int(dm["channel_id"])}
    assert reply["content"] == "done thinking"


async def test_typing_can_be_turned_off(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    config = discord_config(tmp_path, fake_llm.base_url, fake, typing=False)
    async with discord_gateway(config) as (_gw, _client, adapter):
        fake.send_dm("quiet please", user_id=ALICE)
        await answered(fake, 1)
    assert adapter.indicator is None
    assert fake.typing == []


async def test_streaming_previews_by_edit_and_ends_in_one_message(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    answer = words(80)
    fake_llm.push(text(answer, chunk_size=20, chunk_delay=0.02))
    config = discord_config(tmp_path, fake_llm.base_url, fake, streaming=True)
    async with discord_gateway(config) as (_gw, _client, adapter):
        adapter.outbox.edit_interval = 0.05
        question = fake.send_message("stream it", user_id=ALICE, mentions_bot=True)
        await eventually(lambda: fake.sent and fake.sent[0]["content"] == answer)
        fake.send_dm("and now?", user_id=ALICE)  # room for a duplicate final to show up
        await answered(fake, 2)
    final, _dm = bot_posts(fake)
    assert referenced_id(final) == question["id"]
    assert bot_posts(fake, CHANNEL_ID) == [final]  # exactly one message in the channel
    edits = [e["content"] for e in fake.edits if e["message_id"] == int(final["id"])]
    assert len(edits) >= 2  # previews, then the final text
    assert edits[-1] == answer
    assert all(answer.startswith(e.rstrip("…")) for e in edits)


async def test_a_streamed_long_answer_keeps_the_preview_as_its_first_part(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    answer = words(1000)  # about 4,900 characters
    fake_llm.push(text(answer, chunk_size=250, chunk_delay=0.01))
    config = discord_config(tmp_path, fake_llm.base_url, fake, streaming=True)
    async with discord_gateway(config) as (_gw, _client, adapter):
        adapter.outbox.edit_interval = 0.02
        question = fake.send_dm("a long stream", user_id=ALICE)
        await eventually(lambda: "w999" in "".join(m["content"] for m in fake.sent))
    parts = bot_posts(fake)
    assert len(parts) == 3
    assert all(len(p["content"]) <= 2000 for p in parts)
    assert " ".join(p["content"] for p in parts).split() == answer.split()
    assert [referenced_id(p) for p in parts] == [question["id"], None, None]


async def test_an_interrupted_stream_is_marked_and_the_next_answer_is_separate(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    fake_llm.push(text(words(200), chunk_size=3, chunk_delay=0.05))  # about 3 s
    config = discord_config(tmp_path, fake_llm.base_url, fake, streaming=True)
    async with discord_gateway(config) as (_gw, _client, adapter):
        adapter.outbox.edit_interval = 0.02
        fake.send_dm("long story", user_id=ALICE)
        await eventually(lambda: fake.sent)
        second = fake.send_dm("never mind, say hi", user_id=ALICE)
        await eventually(lambda: len(fake.sent) == 2 and "echo" in fake.sent[1]["content"])
        await eventually(lambda: fake.sent[0]["content"].endswith("*(interrupted)*"))
    preview, final = bot_posts(fake)
    assert preview["content"].startswith("w0")
    assert final["content"] == "echo: never mind, say hi"
    assert referenced_id(final) == second["id"]


async def test_a_5xx_on_send_is_retried(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        # discord.py raises 503 at once (it sleeps and retries 500/502/504 itself)
        fake.fail_next("POST", POSTS, status=503)
        fake.send_dm("are you ok?", user_id=ALICE)
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "echo: are you ok?"
    assert posts_made(fake) == 2


async def test_a_permanent_error_is_not_retried_and_the_session_goes_on(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (
        _gw,
        client,
        _adapter,
    ):
        missing = make_error(50013, "Missing Permissions")
        fake.fail_next("POST", POSTS, status=403, body=missing)
        fake.send_dm("one", user_id=ALICE)
        await eventually(lambda: posts_made(fake) == 1 and len(fake_llm.requests) == 1)
        fake.send_dm("two", user_id=BOB)
        (reply,) = await answered(fake, 1)
        _, metrics = await client.get("/metrics")
    assert reply["content"] == "echo: two"
    assert posts_made(fake) == 2
    assert asked(fake_llm) == ["one", "two"]
    assert 'hermes_delivery_failures_total{platform="discord"} 1.0' in metrics


class _Response:
    """Just what `discord.HTTPException` reads from an aiohttp response."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.status, self.reason, self.headers = status, "reason", headers or {}


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            discord.Forbidden(_Response(403), make_error(50013, "Missing Permissions")),
            PermanentAdapterError,
        ),
        (
            discord.NotFound(_Response(404), make_error(10003, "Unknown Channel")),
            PermanentAdapterError,
        ),
        (discord.HTTPException(_Response(401), "401: Unauthorized"), AdapterAuthError),
        (discord.DiscordServerError(_Response(503), "unavailable"), TransientAdapterError),
        (
            discord.HTTPException(_Response(429, {"Retry-After": "7"}), "slow down"),
            RateLimitedError,
        ),
        (discord.RateLimited(12.5), RateLimitedError),
        (aiohttp.ServerDisconnectedError(), TransientAdapterError),
        (TimeoutError(), TransientAdapterError),
    ],
)
def test_discord_errors_become_gateway_errors(error: Exception, expected: type) -> None:
    translated = translate(error, "send")
    assert type(translated) is expected
    if isinstance(translated, RateLimitedError):
        assert translated.retry_after in (7.0, 12.5)
    assert translate(ValueError("a bug"), "send") is None  # bugs are not hidden as delivery errors
