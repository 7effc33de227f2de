"""Drives the real python-telegram-bot 22 against FakeTelegram, so the fake stays wire-faithful."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
import sys
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.constants import ParseMode
from telegram.error import BadRequest, Conflict, Forbidden, InvalidToken, RetryAfter
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)
from telegram.warnings import PTBDeprecationWarning

from tests.fakes.server import async_wait_until
from tests.fakes.telegram import FakeTelegram, make_chat, make_message, make_update

TOKEN = "123:ABC"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN, webhook_retry_delays=(0.02, 0.02)) as server:
        yield server


def build_app(
    fake: FakeTelegram, *, updater: bool = True
) -> Application[Any, Any, Any, Any, Any, Any]:
    builder = ApplicationBuilder().token(TOKEN).base_url(fake.api_url).base_file_url(fake.file_url)
    if not updater:
        builder = builder.updater(None)
    return builder.build()


@contextlib.asynccontextmanager
async def polling(app: Application[Any, Any, Any, Any, Any, Any]) -> AsyncIterator[None]:
    await app.initialize()
    await app.start()
    assert app.updater is not None
    await app.updater.start_polling(poll_interval=0, timeout=2)
    try:
        yield
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()


@contextlib.asynccontextmanager
async def bot_for(fake: FakeTelegram, token: str = TOKEN) -> AsyncIterator[Bot]:
    async with Bot(token, base_url=fake.api_url, base_file_url=fake.file_url) as bot:
        yield bot


Ctx = ContextTypes.DEFAULT_TYPE


async def test_polling_text_message_gets_a_reply(fake: FakeTelegram) -> None:
    app = build_app(fake)

    async def echo(update: Update, context: Ctx) -> None:
        assert update.message is not None
        await update.message.chat.send_action("typing")
        await update.message.reply_text(f"echo: {update.message.text}")

    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, echo))
    async with polling(app):
        update = fake.send_text(chat_id=555, text="hi", username="alice")
        [reply] = await fake.wait_sent(1, chat_id=555)
    assert update["update_id"] == 1000
    assert update["message"]["message_id"] == 1
    assert reply["text"] == "echo: hi"
    assert reply["message_id"] == 2
    assert fake.chat_actions == [(555, "typing")]
    methods = [name for name, _ in fake.calls]
    assert methods[:3] == ["getMe", "deleteWebhook", "getUpdates"]
    offsets = [p.get("offset") for name, p in fake.calls if name == "getUpdates"]
    assert offsets[0] == 0
    assert offsets[-1] == 1001


async def test_commands_are_routed_to_command_handlers(fake: FakeTelegram) -> None:
    app = build_app(fake)
    seen: list[tuple[str, list[str]]] = []

    async def on_command(update: Update, context: Ctx) -> None:
        assert update.message is not None
        assert update.message.text is not None
        seen.append((update.message.text.split()[0], list(context.args or [])))

    async def on_text(update: Update, context: Ctx) -> None:
        seen.append(("text", []))

    app.add_handler(CommandHandler(["start", "stop"], on_command))
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, on_text))
    async with polling(app):
        await app.bot.set_my_commands([("start", "Start"), ("stop", "Stop")])
        fake.send_command(555, "/start")
        fake.send_command(-100, "/stop@hermes_bot now please", chat_type="group")
        fake.send_command(-100, "/stop@other_bot", chat_type="group")  # another bot's command
        fake.send_text(555, "plain")
        await async_wait_until(lambda: len(seen) >= 3)
        await asyncio.sleep(0.05)
    assert seen == [("/start", []), ("/stop@hermes_bot", ["now", "please"]), ("text", [])]
    assert [c["command"] for c in fake.commands] == ["start", "stop"]


async def test_offset_confirms_and_duplicates_are_redelivered(fake: FakeTelegram) -> None:
    app = build_app(fake)
    seen: list[int] = []

    async def record(update: Update, context: Ctx) -> None:
        seen.append(update.update_id)

    app.add_handler(MessageHandler(filters.ALL, record))
    async with polling(app):
        first = fake.send_text(text="one")
        await async_wait_until(lambda: seen == [1000])
        fake.send_text(text="two")
        await async_wait_until(lambda: seen == [1000, 1001])
        fake.inject_duplicate(first)
        await async_wait_until(lambda: len(seen) == 3)
        # PTB's next poll (offset 1001) confirms the duplicate too: it must not come back again.
        await async_wait_until(lambda: fake.pending_updates == [])
        await asyncio.sleep(0.05)
    assert seen == [1000, 1001, 1000]  # the confirmed update came back only as a duplicate


async def test_get_updates_wire_semantics(fake: FakeTelegram) -> None:
    fake.send_text(text="a")
    fake.inject(make_update(0, "edited_message", {}) | {"update_id": 2000})
    url = f"{fake.api_url}{TOKEN}/getUpdates"
    async with aiohttp.ClientSession() as http:

        async def poll(**params: Any) -> list[int]:
            async with http.post(url, data={k: str(v) for k, v in params.items()}) as resp:
                return [u["update_id"] for u in (await resp.json())["result"]]

        assert await poll() == [1000, 2000]
        assert await poll() == [1000, 2000]  # unconfirmed: delivered again
        assert await poll(offset=1000, allowed_updates='["message"]') == [1000]
        assert await poll(offset=1001, limit=1) == [2000]
        started = time.monotonic()
        assert await poll(offset=2001, timeout=0.2) == []  # the long poll is honoured
        assert time.monotonic() - started >= 0.15
        later = asyncio.create_task(poll(offset=2001, timeout=5))
        await asyncio.sleep(0.05)
        fake.send_text(text="b")
        assert await asyncio.wait_for(later, 1) == [2001]  # an update releases the poll
        async with http.get(f"{fake.api_url}{TOKEN}/getMe") as resp:  # GET works too
            assert (await resp.json())["result"]["username"] == "hermes_bot"
        async with http.post(f"{fake.api_url}{TOKEN}/noSuchMethod") as resp:
            assert resp.status == 404
            assert (await resp.json())["description"] == "Not Found"
        async with http.post(f"{fake.api_url}{TOKEN}/sendMessage", json={"chat_id": "7"}) as resp:
            assert resp.status == 400
            assert "text is empty" in (await resp.json())["description"]


async def test_wrong_token_is_unauthorized(fake: FakeTelegram) -> None:
    with pytest.raises(InvalidToken, match="was rejected by the server"):
        async with bot_for(fake, "999:WRONG"):
            pass


async def test_message_length_is_counted_in_utf16_units(fake: FakeTelegram) -> None:
    async with bot_for(fake) as bot:
        # PTB drops "Bad Request: " and capitalizes the rest (lower-casing it), hence (?i).
        with pytest.raises(BadRequest, match=r"(?i)message is too long"):
            await bot.send_message(555, "a" * 4097)
        await bot.send_message(555, "😀" * 2048)  # 2048 emoji = 4096 UTF-16 units
        with pytest.raises(BadRequest, match=r"(?i)message is too long"):
            await bot.send_message(555, "😀" * 2048 + "a")
        # HTML is measured after parsing: tags vanish and &lt; counts as one character.
        await bot.send_message(555, "<b>" + "&lt;" * 4096 + "</b>", parse_mode=ParseMode.HTML)
        with pytest.raises(BadRequest, match=r"(?i)message text is empty"):
            await bot.send_message(555, "<b> </b>", parse_mode=ParseMode.HTML)
    assert [len(m["text"]) for m in fake.sent] == [2048, 4 * 4096 + 7]


async def test_bad_html_cannot_be_parsed(fake: FakeTelegram) -> None:
    bodies = ["<b>bold", "<foo>x</foo>", "😀<b>x</i>", "a < b", "<span>x</span>", "x</b>", "<br>"]
    async with bot_for(fake) as bot:
        for body in bodies:
            with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
                await bot.send_message(555, body, parse_mode=ParseMode.HTML)
            await bot.send_message(555, body)  # the same text without parse_mode is fine
    assert [m["text"] for m in fake.sent] == bodies
    assert {m["parse_mode"] for m in fake.sent} == {None}
    assert fake.errors[2][2].endswith("at byte offset 8")  # UTF-8 bytes, as Telegram reports


async def test_valid_html_passes_and_records_parse_mode(fake: FakeTelegram) -> None:
    html = (
        "<b>b</b><strong>s</strong><i>i</i><em>e</em><u>u</u><ins>n</ins><s>s</s><del>d</del>"
        '<a href="https://x.test/?a=1&amp;b=2">link</a> <pre><code class="language-py">x = 1'
        '</code></pre><tg-spoiler>t</tg-spoiler><span class="tg-spoiler">p</span>'
        "<blockquote expandable>q</blockquote>"
        " 1 &lt; 2 &amp;&amp; 3 &gt; 2 &quot;ok&quot; &#128512;"
    )
    async with bot_for(fake) as bot:
        msg = await bot.send_message(555, html, parse_mode=ParseMode.HTML)
        edited = await bot.edit_message_text("<i>new</i>", 555, msg.message_id, parse_mode="HTML")
        with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
            await bot.edit_message_text("<i>new</i>", 555, msg.message_id, parse_mode="HTML")
        assert await bot.delete_message(555, msg.message_id)
        with pytest.raises(BadRequest, match=r"(?i)message to delete not found"):
            await bot.delete_message(555, msg.message_id)
    assert msg.text is not None
    assert msg.text.endswith('1 < 2 && 3 > 2 "ok" 😀')
    assert "<" not in msg.text[:20]  # the bot sees the parsed text, as from Telegram
    assert not isinstance(edited, bool)
    assert edited.text == "new"
    [record] = fake.sent
    assert record["parse_mode"] == "HTML"
    assert record["text"] == "<i>new</i>"
    assert record["edits"] == 1
    assert record["deleted"] is True


async def test_flood_wait_and_blocked_user_errors(fake: FakeTelegram) -> None:
    async with bot_for(fake) as bot:
        fake.fail_next("sendMessage", status=429, retry_after=1)
        # PTB 22 warns that retry_after becomes a timedelta (now, with PTB_TIMEDELTA=1).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PTBDeprecationWarning)
            with pytest.raises(RetryAfter) as flood:
                await bot.send_message(555, "x")
            assert flood.value.retry_after in (1, dt.timedelta(seconds=1))
        await bot.send_message(555, "x")  # times=1: the next call succeeds
        fake.fail_next("sendMessage", status=403)
        with pytest.raises(Forbidden, match=r"(?i)bot was blocked by the user"):
            await bot.send_message(555, "y")
        fake.fail_next(
            "sendMessage", status=400, description="Bad Request: can't parse entities: X"
        )
        with pytest.raises(BadRequest, match=r"(?i)can't parse entities: X"):
            await bot.send_message(555, "z")
    assert [m["text"] for m in fake.sent] == ["x"]
    assert [status for _, status, _ in fake.errors] == [429, 403, 400]


async def test_polling_survives_a_5xx_on_get_updates(fake: FakeTelegram) -> None:
    app = build_app(fake)
    got: list[str] = []

    async def record(update: Update, context: Ctx) -> None:
        assert update.message is not None
        assert update.message.text is not None
        got.append(update.message.text)

    app.add_handler(MessageHandler(filters.TEXT, record))
    fake.fail_next("getUpdates", status=502, raw_body="<html>502 Bad Gateway</html>")
    async with polling(app):
        fake.send_text(text="after the outage")
        await async_wait_until(lambda: got, timeout=5)  # PTB backs off 1 s after a NetworkError
    assert got == ["after the outage"]
    assert ("getUpdates", 502, "Bad Gateway") in fake.errors


async def test_stalled_long_poll_blocks_and_shutdown_stays_fast() -> None:
    fake = FakeTelegram(token=TOKEN).start()
    app = build_app(fake)
    got: list[str] = []

    async def record(update: Update, context: Ctx) -> None:
        assert update.message is not None
        assert update.message.text is not None
        got.append(update.message.text)

    app.add_handler(MessageHandler(filters.TEXT, record))
    try:
        async with polling(app):
            fake.stall_get_updates = True
            fake.send_text(text="stuck")
            await asyncio.sleep(0.3)
            assert got == []  # the poll holds the update
            fake.stall_get_updates = False
            await async_wait_until(lambda: got == ["stuck"], timeout=2)
        fake.stall_get_updates = True
        async with aiohttp.ClientSession() as http:
            url = f"{fake.api_url}{TOKEN}/getUpdates?timeout=0"
            stalled = asyncio.create_task(http.get(url))
            await asyncio.sleep(0.1)
            assert not stalled.done()  # even timeout=0 does not return
            started = time.monotonic()
            fake.stop()  # aiohttp alone would wait 1 s for the stalled poll
            assert time.monotonic() - started < 0.5
            async with await stalled as resp:
                assert (await resp.json()) == {"ok": True, "result": []}
    finally:
        fake.stop()


async def test_forum_topic_message_carries_thread_id(fake: FakeTelegram) -> None:
    app = build_app(fake)
    seen: list[tuple[int | None, bool | None]] = []

    async def reply(update: Update, context: Ctx) -> None:
        assert update.message is not None
        seen.append((update.message.message_thread_id, update.message.is_topic_message))
        await update.message.reply_text("in topic")  # PTB keeps the thread on its own

    app.add_handler(MessageHandler(filters.TEXT, reply))
    async with polling(app):
        fake.send_text(chat_id=-1001, text="hi", chat_type="supergroup", thread_id=7)
        [sent] = await fake.wait_sent(1, chat_id=-1001)
    assert seen == [(7, True)]
    assert sent["message_thread_id"] == 7


async def test_replies_and_callback_queries(fake: FakeTelegram) -> None:
    app = build_app(fake)
    seen: list[Any] = []

    async def on_text(update: Update, context: Ctx) -> None:
        assert update.message is not None
        reply_to = update.message.reply_to_message
        seen.append(reply_to.from_user.id if reply_to and reply_to.from_user else None)

    async def on_button(update: Update, context: Ctx) -> None:
        assert update.callback_query is not None
        seen.append(update.callback_query.data)
        await update.callback_query.answer("ok")

    app.add_handler(MessageHandler(filters.TEXT, on_text))
    app.add_handler(CallbackQueryHandler(on_button))
    async with polling(app):
        keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("A", callback_data="a")]])
        await app.bot.send_message(-5, "pick", reply_markup=keyboard)
        fake.send_text(-5, "to the bot", chat_type="group", reply_to_bot=True)
        fake.send_callback_query(-5, "a")
        await async_wait_until(lambda: len(seen) == 2 and fake.callback_answers)
    assert seen == [123, "a"]
    assert fake.callback_answers[0]["text"] == "ok"
    assert fake.sent[0]["reply_markup"]["inline_keyboard"][0][0]["callback_data"] == "a"


async def test_raw_updates_of_other_kinds_reach_ptb(fake: FakeTelegram) -> None:
    app = build_app(fake)
    seen: list[tuple[int, Any]] = []

    async def record(update: Update, context: Ctx) -> None:
        post, edited = update.channel_post, update.edited_message
        text = post.text if post else edited.text if edited else dict(update.api_kwargs)
        seen.append((update.update_id, text))

    app.add_handler(TypeHandler(Update, record))
    channel = make_chat(-1009, "channel", title="news")
    async with polling(app):
        fake.inject({"channel_post": make_message(5, channel, None, "post")})
        fake.inject({"edited_message": make_message(6, make_chat(555), None, "fixed", edit_date=1)})
        fake.inject({"update_id": 5000, "future_kind": {"x": 1}})  # a Bot API newer than PTB
        await async_wait_until(lambda: len(seen) == 3)
    assert seen == [(1000, "post"), (1001, "fixed"), (5000, {"future_kind": {"x": 1}})]


async def test_document_and_photo_download(fake: FakeTelegram) -> None:
    app = build_app(fake)
    downloads: list[bytes] = []

    async def fetch(update: Update, context: Ctx) -> None:
        msg = update.message
        assert msg is not None
        attachment = msg.document or msg.photo[-1]
        file = await attachment.get_file()
        downloads.append(bytes(await file.download_as_bytearray()))
        await msg.reply_document(b"report", filename="r.txt", caption="done")

    app.add_handler(MessageHandler(filters.Document.ALL | filters.PHOTO, fetch))
    async with polling(app):
        fake.send_document(file_bytes=b"hello doc", file_name="a.txt", caption="see /x")
        fake.send_photo(file_bytes=b"\xff\xd8jpeg")
        await async_wait_until(lambda: len(fake.uploads) == 2)
    assert downloads == [b"hello doc", b"\xff\xd8jpeg"]
    assert fake.uploads[0]["data"] == b"report"
    assert fake.uploads[0]["file_name"] == "r.txt"
    assert fake.uploads[0]["caption"] == "done"


async def test_webhook_mode_delivers_with_the_secret(fake: FakeTelegram) -> None:
    app = build_app(fake, updater=False)
    replies: list[str] = []

    async def echo(update: Update, context: Ctx) -> None:
        assert update.message is not None
        replies.append(str(update.message.text))
        await update.message.reply_text("via webhook")

    app.add_handler(MessageHandler(filters.TEXT, echo))

    async def hook(request: web.Request) -> web.Response:
        if request.headers.get("X-Telegram-Bot-Api-Secret-Token") != "s3cret":
            return web.Response(status=403)
        await app.update_queue.put(Update.de_json(await request.json(), app.bot))
        return web.Response()

    web_app = web.Application()
    web_app.router.add_post("/tg-hook", hook)
    runner = web.AppRunner(web_app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}/tg-hook"
    await app.initialize()
    await app.start()
    try:
        assert await app.bot.set_webhook(url, secret_token="s3cret")
        assert fake.webhook is not None
        assert fake.webhook["secret_token"] == "s3cret"
        fake.send_text(text="hello hook")
        await fake.wait_sent(1)
        with pytest.raises(Conflict, match="webhook is active"):
            await app.bot.get_updates()
        await app.bot.set_webhook(url, secret_token="wrong")
        fake.send_text(text="rejected")
        await async_wait_until(lambda: len(fake.webhook_deliveries) == 4)
        info = await app.bot.get_webhook_info()
    finally:
        await app.stop()
        await app.shutdown()
        await runner.cleanup()
    assert replies == ["hello hook"]
    assert [d["status"] for d in fake.webhook_deliveries] == [200, 403, 403, 403]  # 2 retries
    assert info.url == url
    assert "403" in str(info.last_error_message)


async def test_cli_serves_another_process() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.telegram",
        "--port",
        "0",
        "--token",
        TOKEN,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        match = re.fullmatch(r"READY (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line
        base = match.group(1)
        await _drive_cli_fake(base)
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 5) == 0


async def _drive_cli_fake(base: str) -> None:
    app = ApplicationBuilder().token(TOKEN).base_url(f"{base}/bot").build()

    async def echo(update: Update, context: Ctx) -> None:
        assert update.message is not None
        await update.message.reply_text(f"echo: {update.message.text}")

    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with aiohttp.ClientSession() as http, polling(app):
        async with http.post(f"{base}/_fake/send_text", json={"chat_id": 9, "text": "x"}) as r:
            assert (await r.json())["message"]["chat"]["id"] == 9
        async with http.get(f"{base}/_fake/sent", params={"since": 0, "wait": 5}) as r:
            body = await r.json()
        assert [m["text"] for m in body["sent"]] == ["echo: x"]
        assert body["next"] == 1
        started = time.monotonic()
        async with http.get(f"{base}/_fake/sent", params={"since": 1, "wait": 0.2}) as r:
            assert (await r.json())["sent"] == []
        assert time.monotonic() - started >= 0.15
        async with http.get(f"{base}/_fake/stats") as r:
            assert (await r.json())["calls"]["sendMessage"] == 1


def test_factories_build_what_ptb_parses() -> None:
    chat = make_chat(-1001, "supergroup", is_forum=True)
    msg = make_message(3, chat, None, "/help@hermes_bot 😀 @someone", thread_id=9)
    update = Update.de_json(make_update(1000, "message", msg), None)
    assert update.message is not None
    assert update.message.is_topic_message
    assert [e.type for e in update.message.entities] == ["bot_command", "mention"]
    assert update.message.entities[1].offset == 20  # UTF-16: the emoji counts 2


async def test_a_second_concurrent_get_updates_ends_the_first_with_409(fake: FakeTelegram) -> None:
    """Telegram runs one getUpdates at a time per bot: a newer long poll from another
    connection terminates the waiting one with 409; one whose client hung up is no conflict."""
    url = f"{fake.api_url}{fake.token}/getUpdates"
    async with aiohttp.ClientSession() as first, aiohttp.ClientSession() as second:
        waiting = asyncio.create_task(first.post(url, json={"timeout": 5}))
        await asyncio.sleep(0.3)
        newer = asyncio.create_task(second.post(url, json={"timeout": 1}))
        older = await asyncio.wait_for(waiting, 3)
        assert older.status == 409
        assert "terminated by other getUpdates request" in (await older.json())["description"]
        assert (await asyncio.wait_for(newer, 5)).status == 200
    assert [e[1] for e in fake.errors] == [409]
    async with aiohttp.ClientSession() as gone, aiohttp.ClientSession() as after:
        hung_up = asyncio.create_task(gone.post(url, json={"timeout": 5}))
        await asyncio.sleep(0.3)
        hung_up.cancel()  # the client gives up its long poll (a stop, a lost lease)
        await asyncio.gather(hung_up, return_exceptions=True)
        await gone.close()
        assert (await after.post(url, json={"timeout": 1})).status == 200
    assert [e[1] for e in fake.errors] == [409]
