"""A live preview a crash left half-written is finished at the next start, on Telegram, Discord
and Slack: the replayed reply is edited into it (then the rest is sent), or a rerun streams into
it; if it is gone, the reply is sent as new messages instead."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_gateway.config import Config
from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Store
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram, plain_text
from tests.harness import eventually, running_gateway
from tests.integration.test_discord_kit import (
    ALICE,
    CHANNEL_ID,
    bot_posts,
    discord_config,
    discord_gateway,
)
from tests.integration.test_discord_kit import TOKEN as DISCORD_TOKEN
from tests.integration.test_discord_kit import fake_discord as discord_fake
from tests.integration.test_slack import slack_config, started
from tests.integration.test_telegram import TOKEN, tg_config
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
HALF = "part1 w0 w1 w2"  # what the preview showed when the process died


def answer(words_per_part: int) -> str:
    return "\n\n".join(
        f"part{n} " + " ".join(f"w{j}" for j in range(words_per_part)) for n in (1, 2)
    )


async def crashed_with_preview(
    config: Config, event: MessageEvent, preview: str, reply: str | None
) -> None:
    """The inbox a kill leaves: the message, the preview's reference and, when the run had
    finished, its stored reply (else the message runs again)."""
    store = Store(config.store_url)
    await store.open()
    try:
        inbox_id = await store.accept(event)
        assert inbox_id is not None
        await store.remember_preview(event, preview)
        if reply is not None:
            await store.complete_turn(event.session_key, [], [inbox_id], reply, "run-before")
    finally:
        await store.close()


def message(platform: str, chat_id: str, message_id: str, **kw: Any) -> MessageEvent:
    return MessageEvent.create(
        platform=platform,
        chat_type=kw.pop("chat_type", "dm"),
        chat_id=chat_id,
        user_id=kw.pop("user_id", chat_id),
        message_id=message_id,
        text="a question",
        **kw,
    )


# -- Telegram ------------------------------------------------------------------------------------


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def telegram_preview(tg: FakeTelegram) -> int:
    """A bot message showing the start of an answer, as the preview left it."""
    reply = httpx.post(f"{tg.api_url}{TOKEN}/sendMessage", data={"chat_id": 555, "text": HALF})
    return int(reply.json()["result"]["message_id"])


def telegram_texts(tg: FakeTelegram) -> list[str]:
    return [plain_text(m["text"], m["parse_mode"]) for m in tg.messages_to(555)]


async def test_telegram_replayed_reply_is_edited_into_the_preview(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg, streaming=True)
    preview = telegram_preview(tg)
    reply = answer(700)  # two parts
    await crashed_with_preview(config, message("telegram", "555", "9"), str(preview), reply)
    async with running_gateway(config):
        await tg.wait_sent(2, chat_id=555, timeout=10)
        await eventually(lambda: tg.messages_to(555)[0]["edits"] == 1)
        await asyncio.sleep(0.3)
    first, second = tg.messages_to(555)
    assert first["message_id"] == preview  # finished, not orphaned
    assert [t.split()[0] for t in telegram_texts(tg)] == ["part1", "part2"]
    assert " ".join(telegram_texts(tg)).split() == reply.split()
    assert fake_llm.requests == []


async def test_telegram_rerun_streams_into_the_preview_it_left(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg, streaming=True)
    preview = telegram_preview(tg)
    await crashed_with_preview(config, message("telegram", "555", "9"), str(preview), None)
    final = " ".join(f"w{i}" for i in range(40))
    fake_llm.push(text(final, chunk_size=8, chunk_delay=0.05))
    async with running_gateway(config) as (gw, _):
        await eventually(lambda: fake_llm.requests)
        await eventually(lambda: not gw.runner.busy("telegram:dm:555"))
        await asyncio.sleep(0.3)
    [only] = tg.messages_to(555)  # the run went on in the preview: no second message
    assert only["message_id"] == preview
    assert only["text"] == final
    assert only["edits"] >= 1  # it showed what the killed run wrote: it was edited


async def test_telegram_a_preview_that_is_gone_falls_back_to_new_messages(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg, streaming=True)
    preview = telegram_preview(tg)
    httpx.post(f"{tg.api_url}{TOKEN}/deleteMessage", data={"chat_id": 555, "message_id": preview})
    await crashed_with_preview(config, message("telegram", "555", "9"), str(preview), "the answer")
    async with running_gateway(config):
        await tg.wait_sent(2, chat_id=555, timeout=10)  # the deleted preview, and the reply
        await asyncio.sleep(0.3)
    gone, reply = tg.messages_to(555)
    assert (gone["message_id"], gone["deleted"], gone["edits"]) == (preview, True, 0)
    assert reply["text"] == "the answer"
    assert reply["reply_parameters"]["message_id"] == 9  # sent as the answer, quoting


# -- Discord -------------------------------------------------------------------------------------


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    with discord_fake() as fake:
        yield fake


async def test_discord_replayed_reply_is_edited_into_the_preview(
    tmp_path: Path, fake_llm: FakeOpenAI, discord: FakeDiscord
) -> None:
    config = discord_config(tmp_path, fake_llm.base_url, discord, streaming=True)
    posted = httpx.post(
        f"{discord.api_base}/channels/{CHANNEL_ID}/messages",
        json={"content": HALF},
        headers={"Authorization": f"Bot {DISCORD_TOKEN}"},
    ).json()
    event = message("discord", str(CHANNEL_ID), "555000", chat_type="group", user_id=str(ALICE))
    reply = answer(400)
    await crashed_with_preview(config, event, str(posted["id"]), reply)
    async with discord_gateway(config):
        await eventually(lambda: len(bot_posts(discord)) == 2, timeout=10)
        await eventually(lambda: bot_posts(discord)[0]["content"].startswith("part1"))
        await asyncio.sleep(0.3)
    first, second = bot_posts(discord)
    assert first["id"] == posted["id"]
    assert [first["content"].split()[0], second["content"].split()[0]] == ["part1", "part2"]
    assert fake_llm.requests == []


# -- Slack ---------------------------------------------------------------------------------------


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


async def test_slack_replayed_reply_is_edited_into_the_preview(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    config = slack_config(tmp_path, fake_llm, slack, streaming=True, message_limit=300)
    posted = httpx.post(
        f"{slack.api_base}chat.postMessage",
        json={"channel": "D1", "text": HALF},
        headers={"Authorization": f"Bearer {slack.bot_token}"},
    ).json()
    event = message("slack", "D1", slack.next_ts(), user_id="U123")
    reply = answer(60)
    await crashed_with_preview(config, event, posted["ts"], reply)
    async with started(config):
        await eventually(lambda: len(slack.messages_in("D1")) == 2, timeout=10)
        await eventually(lambda: slack.messages_in("D1")[0]["text"].startswith("part1"))
        await asyncio.sleep(0.3)
    first, second = slack.messages_in("D1")
    assert first["ts"] == posted["ts"]
    assert first["history"] == [HALF]
    assert [first["text"].split()[0], second["text"].split()[0]] == ["part1", "part2"]
    assert fake_llm.requests == []
