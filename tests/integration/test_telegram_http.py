"""The aiohttp transport for python-telegram-bot, against the fake Bot API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from telegram import Bot
from telegram.error import BadRequest, RetryAfter, TimedOut

from adapters.telegram.http import AiohttpRequest
from tests.fakes.telegram import FakeTelegram

TOKEN = "123:ABCDEF"


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    request = AiohttpRequest(read_timeout=2)
    polling = AiohttpRequest(read_timeout=2)
    bot = Bot(
        TOKEN,
        base_url=tg.api_url,
        base_file_url=tg.file_url,
        request=request,
        get_updates_request=polling,
    )
    await bot.initialize()
    yield bot
    await bot.shutdown()


async def test_calls_round_trip(bot: Bot, tg: FakeTelegram) -> None:
    assert bot.username == "hermes_bot"
    sent = await bot.send_message(555, "<b>bold</b> &amp; plain", parse_mode="HTML")
    assert sent.message_id > 0
    assert tg.messages_to(555)[-1]["text"] == "<b>bold</b> &amp; plain"
    assert tg.messages_to(555)[-1]["parse_mode"] == "HTML"
    await bot.send_chat_action(555, "typing")
    assert tg.chat_actions[-1][0] == 555


async def test_multipart_upload(bot: Bot, tg: FakeTelegram) -> None:
    await bot.send_document(555, document=b"file body", filename="notes.txt", caption="here")
    upload = tg.uploads[-1]
    assert (upload["caption"], upload["file_name"], upload["data"]) == (
        "here",
        "notes.txt",
        b"file body",
    )


async def test_errors_become_ptb_errors(bot: Bot, tg: FakeTelegram) -> None:
    tg.fail_next("sendMessage", status=429, retry_after=3)
    with pytest.raises(RetryAfter):
        await bot.send_message(555, "x")
    with pytest.raises(BadRequest, match="too long"):
        await bot.send_message(555, "a" * 4097)


async def test_updates_and_timeouts(bot: Bot, tg: FakeTelegram) -> None:
    tg.send_text(chat_id=555, text="hello there")
    updates = await bot.get_updates(timeout=1)
    assert [u.message.text for u in updates if u.message] == ["hello there"]
    tg.stall_get_updates = True
    with pytest.raises(TimedOut):
        await asyncio.wait_for(bot.get_updates(timeout=0, read_timeout=0.3), 5)
    tg.stall_get_updates = False
