"""Default deny on every platform: with no allowlist nobody reaches the model, strangers get
silence (logged), and bots, the bot itself included, are ignored even when allowlisted."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.chaos.kit import ChaosTelegram, telegram_config
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import make_chat, make_message, make_update, make_user
from tests.harness import eventually, make_config, running_gateway
from tests.security import keys

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


def denied(logs: list[dict[str, object]]) -> list[object]:
    return [e["user_id"] for e in logs if e["event"] == "access.denied"]


@pytest.mark.usefixtures("fast_telegram")
async def test_telegram_denies_everyone_by_default(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram
) -> None:
    config = telegram_config(tmp_path, llm, tg, chats=())  # allowed_users: []
    with capture_logs() as logs:
        async with running_gateway(config) as (gw, _):
            await eventually(lambda: gw.adapters["telegram"].health().ready)
            tg.send_text(555, "let me in")
            tg.send_text(-100, "@hermes_bot hello", chat_type="supergroup", user_id=556)
            await eventually(lambda: len(denied(logs)) == 2)
            await asyncio.sleep(0.3)
    assert llm.requests == [] and tg.sent == []
    assert denied(logs) == ["555", "556"]


@pytest.mark.usefixtures("fast_telegram")
async def test_telegram_ignores_bots_and_itself_even_when_allowlisted(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram
) -> None:
    other_bot = make_user(777, "other_bot", is_bot=True)
    itself = make_user(keys.TELEGRAM_BOT_ID, "hermes_bot", is_bot=True)
    chats = (555, 777, keys.TELEGRAM_BOT_ID)
    async with running_gateway(telegram_config(tmp_path, llm, tg, chats=chats)) as (gw, _):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        for i, user in enumerate((other_bot, itself)):
            msg = make_message(50 + i, make_chat(555), user, "obey me")
            tg.inject(make_update(5000 + i, "message", msg))
        tg.send_text(555, "I am a person")  # allowlisted and human: the only one answered
        [reply] = await tg.wait_sent(1, chat_id=555)
        await asyncio.sleep(0.3)
    assert reply["text"] == "echo: I am a person"
    assert [r["messages"][-1]["content"] for r in llm.requests] == ["I am a person"]


@pytest.fixture
def discord_fake() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(token=keys.DISCORD_TOKEN, bot_id=1000, guild_id=2000, channel_id=3000)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


async def test_discord_denies_everyone_by_default(
    tmp_path: Path, llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    section = {
        "enabled": True,
        "token": keys.DISCORD_TOKEN,
        "api_base": discord_fake.api_base,
        "gateway_url": discord_fake.gateway_url,
        "guild_ready_timeout_s": 0.02,
        "identify_delay_s": 0,
        "sync_commands": False,
    }
    config = make_config(
        tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY}, platforms={"discord": section}
    )
    with capture_logs() as logs:
        async with running_gateway(config) as (gw, _):
            await eventually(lambda: gw.adapters["discord"].health().ready, 10)
            discord_fake.send_dm("let me in", user_id=42)
            discord_fake.send_message("hello bot", user_id=43, mentions_bot=True)
            discord_fake.send_message("hi", user_id=44, author_bot=True, mentions_bot=True)
            await eventually(lambda: len(denied(logs)) == 2)
            await asyncio.sleep(0.3)
    assert llm.requests == [] and discord_fake.sent == []
    assert sorted(denied(logs)) == ["42", "43"]  # the bot was not even considered


async def test_slack_denies_everyone_by_default(tmp_path: Path, llm: FakeOpenAI) -> None:
    with FakeSlack(bot_token=keys.SLACK_BOT_TOKEN, app_token=keys.SLACK_APP_TOKEN) as fake:
        section = {
            "enabled": True,
            "bot_token": keys.SLACK_BOT_TOKEN,
            "app_token": keys.SLACK_APP_TOKEN,
            "api_base": fake.api_base,
        }
        config = make_config(
            tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY}, platforms={"slack": section}
        )
        with capture_logs() as logs:
            async with running_gateway(config) as (gw, _):
                await eventually(lambda: gw.adapters["slack"].health().ready, 10)
                fake.send_message("let me in", channel="D1", user="U999")
                fake.send_mention("<@U0BOT> hello", channel="C1", user="U998")
                await eventually(lambda: len(denied(logs)) == 2)
                await asyncio.sleep(0.3)
        posted = list(fake.posted)
    assert llm.requests == [] and posted == []
    assert sorted(denied(logs)) == ["U998", "U999"]
