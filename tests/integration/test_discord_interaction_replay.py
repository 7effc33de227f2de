"""A slash command answered after a restart: the answer computed before the stop is sent by the
replay through the interaction's webhook (its "thinking..." message becomes the answer) while the
token lives; past its life, or when Discord refuses the token, it goes to the channel."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import adapters.discord.interactions
from hermes_gateway.config import Config
from hermes_gateway.core.bus import LifecycleEvent
from hermes_gateway.core.delivery import Delivery
from tests.chaos.kit import real_logging, secrets_config
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import LOADING_FLAG
from tests.fakes.openai import FakeOpenAI
from tests.harness import eventually
from tests.integration.test_discord_kit import (
    ALICE,
    CHANNEL_ID,
    bot_posts,
    discord_config,
    discord_gateway,
    fake_discord,
)

ANSWER = "echo: the question"


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        yield fake


async def answered_but_not_sent(config: Config, fake: FakeDiscord) -> dict[str, Any]:
    """`/queue the question` deferred and answered by the model, but every followup refused
    (rate limited) until the gateway stopped: the inbox holds the reply, unsent."""
    fake.fail_next("POST", r"^/webhooks/", status=429, retry_after=0, times=10_000)
    async with discord_gateway(config) as (gw, _client, _adapter):
        failures: list[LifecycleEvent] = []

        async def on_error(ev: LifecycleEvent) -> None:
            failures.append(ev)

        gw.bus.subscribe(on_error, ["error"], name="test:errors")
        payload = fake.send_interaction("queue", user_id=ALICE, options={"message": "the question"})
        await eventually(lambda: failures, timeout=10)
        fake.clear_faults()
    assert [r["kind"] for r in fake.interaction_responses] == ["callback"]  # "thinking..."
    assert fake.sent == []
    return payload


def original(fake: FakeDiscord, interaction: dict[str, Any]) -> dict[str, Any]:
    """The interaction's own message: "thinking..." until answered."""
    (message,) = [
        m
        for m in fake.messages_in(CHANNEL_ID)
        if (m.get("interaction_metadata") or {}).get("id") == interaction["id"]
    ]
    return message


def webhook_calls(fake: FakeDiscord, interaction: dict[str, Any], since: int) -> list[str]:
    prefix = f"/webhooks/{fake.application_id}/{interaction['token']}"
    return [path for _method, path in fake.requests[since:] if path.startswith(prefix)]


async def test_a_replay_within_the_token_life_answers_through_the_interaction(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    config = discord_config(tmp_path, fake_llm.base_url, fake)
    with real_logging(secrets_config(tmp_path / "log-home", "debug")) as log_files:
        interaction = await answered_but_not_sent(config, fake)
        async with discord_gateway(config):  # the restart
            await eventually(lambda: len(fake.interaction_responses) == 2, timeout=10)
    callback, followup = fake.interaction_responses
    assert (callback["type"], followup["kind"], followup["content"]) == (5, "followup", ANSWER)
    assert followup["interaction_id"] == int(interaction["id"])
    message = original(fake, interaction)
    assert message["content"] == ANSWER
    assert not message["flags"] & LOADING_FLAG  # the placeholder was replaced
    assert fake.sent == []  # nothing went to the channel
    assert len(fake_llm.requests) == 1  # the stored answer, not a second model call
    for path in log_files():
        assert interaction["token"] not in path.read_text(), path.name


async def test_past_the_token_life_the_replay_answers_in_the_channel(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = discord_config(tmp_path, fake_llm.base_url, fake)
    interaction = await answered_but_not_sent(config, fake)
    # 15 minutes later, for the gateway and for Discord alike
    monkeypatch.setattr(adapters.discord.interactions, "INTERACTION_TTL_S", 0.0)
    fake.interaction_lifetime_s = 0.0
    before = len(fake.requests)
    async with discord_gateway(config):
        await eventually(lambda: bot_posts(fake), timeout=10)
    (post,) = bot_posts(fake)
    assert (post["content"], int(post["channel_id"])) == (ANSWER, CHANNEL_ID)
    assert [r["kind"] for r in fake.interaction_responses] == ["callback"]
    assert webhook_calls(fake, interaction, before) == []  # a dead token is not even tried


async def test_a_token_discord_refuses_falls_back_to_the_channel(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    """Our clock says the token lives, Discord says 401 Invalid Webhook Token (its clock, or
    the token was revoked): a dead interaction, not a rejected bot token."""
    config = discord_config(tmp_path, fake_llm.base_url, fake)
    interaction = await answered_but_not_sent(config, fake)
    fake.interaction_lifetime_s = 0.0
    before = len(fake.requests)
    async with discord_gateway(config) as (_gw, _client, adapter):
        await eventually(lambda: bot_posts(fake), timeout=10)
        assert adapter.health().ready
    (post,) = bot_posts(fake)
    assert post["content"] == ANSWER
    assert [r["kind"] for r in fake.interaction_responses] == ["callback"]
    assert len(webhook_calls(fake, interaction, before)) == 1  # tried once, refused: no retries


async def test_without_a_restart_a_redelivered_answer_still_uses_the_interaction(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live path: followups rate limited past the adapter's retries, then offered again
    by the delivery's background retry, which answers in the interaction too."""
    monkeypatch.setattr(Delivery, "redeliver_delays", (0.3,))
    fake.fail_next("POST", r"^/webhooks/", status=429, retry_after=0, times=15)
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        interaction = fake.send_interaction("queue", user_id=ALICE, options={"message": "q"})
        await eventually(lambda: len(fake.interaction_responses) == 2, timeout=10)
    assert fake.interaction_responses[1]["content"] == "echo: q"
    assert original(fake, interaction)["content"] == "echo: q"
    assert fake.sent == []
