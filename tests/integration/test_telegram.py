"""Telegram intake against the real python-telegram-bot and `FakeTelegram`: DMs, group gating,
forum topics, attachments, access and pairing, duplicates and update shapes we ignore."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from telegram import Update

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.normalize import normalize
from hermes_gateway.config import Config
from hermes_gateway.core.commands import Commands, menu
from hermes_gateway.errors import PermanentAdapterError
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.intake import BotIdentity
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram, make_chat, make_message, make_user
from tests.harness import eventually, make_config, running_gateway

TOKEN = "123:ABC"
STICKER = {
    "file_id": "s1",
    "file_unique_id": "u1",
    "type": "regular",
    "width": 512,
    "height": 512,
    "is_animated": False,
    "is_video": False,
}
TEXT_MENTION = {"type": "text_mention", "offset": 3, "length": 6, "user": make_user(123, "x")}
CAPTION_MENTION = {"type": "mention", "offset": 0, "length": 11}
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture(autouse=True)
def fast_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short long polls and intervals, so tests wait on conditions for milliseconds."""
    monkeypatch.setattr(TelegramAdapter, "poll_timeout", 1.0)
    monkeypatch.setattr(TelegramAdapter, "typing_interval", 0.1)
    monkeypatch.setattr(TelegramAdapter, "edit_interval", 0.1)
    monkeypatch.setattr(TelegramAdapter, "retry_first", 0.1)
    monkeypatch.setattr(TelegramAdapter, "lock_retry", 0.1)


def tg_config(tmp_path: Path, llm: FakeOpenAI, fake: FakeTelegram, **telegram: Any) -> Config:
    """A gateway config with Telegram pointed at ``fake``; ``telegram`` overrides the section."""
    section = {
        "enabled": True,
        "token": TOKEN,
        "base_url": fake.api_url,
        "base_file_url": fake.file_url,
        "allow_all": True,
        **telegram,
    }
    return make_config(tmp_path, llm.base_url, platforms={"telegram": section})


def texts(fake: FakeTelegram, chat_id: int) -> list[str]:
    return [m["text"] for m in fake.messages_to(chat_id)]


def user_texts(llm: FakeOpenAI) -> list[str]:
    return [r["messages"][-1]["content"] for r in llm.requests]


async def test_dm_message_is_answered_as_a_reply(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, client):
        update = tg.send_text(555, "hello there")
        [reply] = await tg.wait_sent(1, chat_id=555)
        status, ready = await client.get("/readyz")
    assert reply["text"] == "echo: hello there"
    assert reply["parse_mode"] == "HTML"
    assert reply["reply_parameters"]["message_id"] == update["message"]["message_id"]
    assert reply["reply_parameters"]["allow_sending_without_reply"] is True
    assert status == 200 and ready["ready"] is True
    # the menu is the core's whole command list, approvals and /compact included
    listed = [(c["command"], c["description"]) for c in tg.commands]
    assert listed == [(c.name, c.description) for c in menu()]
    assert {c["command"] for c in tg.commands} == Commands.NAMES
    assert ("getUpdates", {"allowed_updates": ["message"]}) in [
        (n, {"allowed_updates": p.get("allowed_updates")}) for n, p in tg.calls
    ]


async def test_group_answers_only_when_addressed_and_strips_the_mention(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    group: dict[str, Any] = {"chat_type": "supergroup"}
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        tg.send_text(-100, "just chatting among ourselves", **group)
        tg.send_text(-100, "@hermes_bot, what is 2+2?", **group)
        await tg.wait_sent(1, chat_id=-100)
        tg.send_text(-100, "and 3+3?", reply_to_bot=True, **group)
        await tg.wait_sent(2, chat_id=-100)
        tg.send_command(-100, "/stop@other_bot", **group)  # another bot's command
        tg.send_command(-100, "/help@hermes_bot", **group)
        await tg.wait_sent(3, chat_id=-100)
        tg.send_text(-100, "ask @someone_else", **group)
        tg.send_text(-100, "thanks @HERMES_BOT!", **group)
        await tg.wait_sent(4, chat_id=-100)
    assert user_texts(fake_llm) == ["what is 2+2?", "and 3+3?", "thanks!"]
    sent = texts(tg, -100)
    assert sent[:2] == ["echo: what is 2+2?", "echo: and 3+3?"]
    assert sent[2].startswith("Commands:")
    assert sent[3] == "echo: thanks!"


async def test_group_sessions_are_per_user_and_a_topic_is_shared(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    topic: dict[str, Any] = {"thread_id": 7}
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        for user, text in ((1, "I am one"), (2, "I am two")):
            tg.send_text(-100, f"@hermes_bot {text}", chat_type="supergroup", user_id=user)
        await tg.wait_sent(2, chat_id=-100)
        for user, text in ((1, "topic one"), (2, "topic two")):
            tg.send_text(-100, f"@hermes_bot {text}", chat_type="supergroup", user_id=user, **topic)
            await tg.wait_sent(3 if user == 1 else 4, chat_id=-100)
    [first, second, topic1, topic2] = [r["messages"] for r in fake_llm.requests]
    assert len(second) == len(first)  # user 2 did not see user 1's turn
    assert [m["content"] for m in topic2 if m["role"] == "user"] == ["topic one", "topic two"]
    assert len(topic1) == len(first)
    sent = tg.messages_to(-100)
    assert [m["message_thread_id"] for m in sent] == [None, None, 7, 7]
    assert sent[3]["text"] == "echo: topic two"


async def test_duplicate_update_is_processed_once(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        first = tg.send_text(555, "once")
        await tg.wait_sent(1, chat_id=555)
        tg.inject_duplicate(first)  # Telegram redelivers after a lost confirmation
        tg.send_text(556, "same message id, other chat", message_id=first["message"]["message_id"])
        tg.send_text(555, "twice")
        await tg.wait_sent(2, chat_id=555)
        await tg.wait_sent(1, chat_id=556)
    assert texts(tg, 555) == ["echo: once", "echo: twice"]
    assert sorted(user_texts(fake_llm)) == ["once", "same message id, other chat", "twice"]


async def test_a_burst_is_taken_in_slices_and_all_of_it_answered(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """A burst waiting at start is fetched `POLL_BATCH` updates per getUpdates (an answer is
    parsed in one go on the loop), and slicing it loses and repeats nothing."""
    from adapters.telegram.poller import POLL_BATCH

    burst = 2 * POLL_BATCH + 7
    for n in range(burst):
        tg.send_text(1000 + n, f"m{n}")
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)):
        for n in range(burst):
            await tg.wait_sent(1, chat_id=1000 + n)
        polls = [p for name, p in tg.calls if name == "getUpdates"]
    assert polls and all(int(p["limit"]) == POLL_BATCH for p in polls)
    assert len(polls) >= 3  # the burst took at least three answers
    # the stop confirmed the last slice too: a restart does not fetch the burst again
    assert tg.pending_updates == []
    assert sorted(user_texts(fake_llm)) == sorted(f"m{n}" for n in range(burst))
    assert all(texts(tg, 1000 + n) == [f"echo: m{n}"] for n in range(burst))


async def test_update_shapes_we_do_not_handle_are_ignored(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat, alice = make_chat(555), make_user(555, "alice")
    junk: list[dict[str, Any]] = [
        {"edited_message": make_message(90, chat, alice, "edited", edit_date=1)},
        {"channel_post": make_message(91, make_chat(-1009, "channel"), None, "post")},
        {"future_kind": {"x": 1}},
        {"message": "not a message at all"},
        {"message": {"message_id": 92}},  # no chat, no date: PTB cannot parse it
        {"message": make_message(93, chat, alice, sticker=STICKER)},
        {"message": make_message(94, chat, alice, new_chat_title="renamed")},
        {"message": make_message(95, chat, None, "no sender")},
        {"message": make_message(96, chat, make_user(9, "other_bot", is_bot=True), "beep")},
        {"message": make_message(97, chat, make_user(123, "hermes_bot", is_bot=True), "me")},
        {"update_id": "x", "message": {}},
    ]
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        for update in junk:
            tg.inject(update)
        tg.send_text(555, "still here?")
        [reply] = await tg.wait_sent(1, chat_id=555)
        polls = sum(1 for name, _ in tg.calls if name == "getUpdates")
    assert reply["text"] == "echo: still here?"
    assert user_texts(fake_llm) == ["still here?"]
    assert polls < 20  # a batch PTB cannot parse did not make it re-poll in a tight loop


async def test_unknown_user_gets_silence(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg, allow_all=False, allowed_users=[42])
    async with running_gateway(config) as (gw, _):
        tg.send_text(777, "let me in")
        tg.send_text(42, "hi, it's me")
        await tg.wait_sent(1, chat_id=42)
    assert tg.messages_to(777) == []
    assert user_texts(fake_llm) == ["hi, it's me"]


async def test_pairing_code_then_approval_then_answers(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg, allow_all=False, pairing=True)
    async with running_gateway(config) as (gw, client):
        tg.send_text(777, "hello?", username="carol")
        [notice] = await tg.wait_sent(1, chat_id=777)
        code = re.search(r"approve telegram ([A-Z2-9]{8})", notice["text"])
        assert code, notice["text"]
        tg.send_text(777, "still me", username="carol")  # the same code again, not a new one
        await tg.wait_sent(2, chat_id=777)
        async with client.http.post(
            f"{client.base}/pairing/approve",
            json={"platform": "telegram", "code": code[1]},
            headers=client.operator,
        ) as resp:
            assert resp.status == 200, await resp.text()
        await tg.wait_sent(3, chat_id=777)
        tg.send_text(777, "now?", username="carol")
        await tg.wait_sent(4, chat_id=777)
    sent = texts(tg, 777)
    assert code[1] in sent[1]
    assert sent[2:] == ["You're approved. Say hi!", "echo: now?"]
    assert user_texts(fake_llm) == ["now?"]


async def test_attachments_are_described_and_downloaded_on_demand(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    seen: list[MessageEvent | None] = []
    config = tg_config(tmp_path, fake_llm, tg, media_max_bytes=100)
    async with running_gateway(config) as (gw, _):
        gw.bus.subscribe(lambda ev: seen.append(ev.message), ["message_received"], name="t")
        tg.send_photo(555, file_bytes=b"\xff\xd8jpeg", caption="what is this?")
        await tg.wait_sent(1, chat_id=555)
        tg.send_document(555, file_bytes=b"x" * 500, file_name="big.log")
        await tg.wait_sent(2, chat_id=555)
        await eventually(lambda: len(seen) == 2)
        adapter = gw.adapters["telegram"]
        assert isinstance(adapter, TelegramAdapter)
        assert not (gw.config.home_path / "media").exists()  # nothing fetched at intake
        assert seen[0] is not None and seen[1] is not None
        photo, big = seen[0].attachments[0], seen[1].attachments[0]
        path = await adapter.download(photo)
        with pytest.raises(PermanentAdapterError, match="500 bytes"):
            await adapter.download(big)
    assert path.parent == gw.config.home_path / "media"
    assert path.read_bytes() == b"\xff\xd8jpeg"
    assert (photo.kind, big.kind, big.name, big.size) == ("image", "document", "big.log", 500)
    assert user_texts(fake_llm) == [
        "what is this?\n\n[attached image: photo.jpg, 6 bytes]",
        "[attached document: big.log, 500 bytes]",
    ]


ME = BotIdentity("123", "hermes_bot")
GROUP = make_chat(-100, "supergroup")
BOB = make_user(7, "bob")


def inbound(message: dict[str, Any]) -> MessageEvent | None:
    found = normalize(Update.de_json({"update_id": 1, "message": message}, None), ME)
    return None if found is None else found.event


@pytest.mark.parametrize(
    ("text", "extra", "want_text", "want_mentioned"),
    [
        ("@hermes_bot hi", {}, "hi", True),
        ("hi @hermes_bot, how are you?", {}, "hi, how are you?", True),
        ("😀 @hermes_bot 😀", {}, "😀 😀", True),  # UTF-16 offsets past an emoji
        ("hi Hermes", {"entities": [TEXT_MENTION]}, "hi", True),
        ("/status@hermes_bot", {}, "/status@hermes_bot", True),
        ("/status", {}, "/status", True),
        ("mail me@hermes_bot.example", {}, "mail me@hermes_bot.example", False),
        ("hello all", {}, "hello all", False),
    ],
)
def test_group_addressing(
    text: str, extra: dict[str, Any], want_text: str, want_mentioned: bool
) -> None:
    event = inbound(make_message(5, GROUP, BOB, text) | extra)
    assert event is not None
    assert (event.text, event.mentioned) == (want_text, want_mentioned)
    assert event.session_key == "telegram:group:-100:7"


def test_captions_media_and_forum_topics() -> None:
    animation = {"file_id": "a1", "file_unique_id": "ua", "width": 1, "height": 1}
    animation |= {"duration": 1, "file_name": "cat.gif", "file_size": 2048}
    voice = {"file_id": "v1", "file_unique_id": "uv", "duration": 3, "file_size": 3 * 1024**2}
    caption: dict[str, Any] = {"caption": "@hermes_bot look", "caption_entities": [CAPTION_MENTION]}
    gif = inbound(make_message(6, GROUP, BOB, animation=animation, document=animation, **caption))
    spoken = inbound(make_message(7, make_chat(7), BOB, voice=voice))
    topic_root = make_message(9, GROUP, BOB, "topic", thread_id=9)
    in_topic = inbound(make_message(10, GROUP, BOB, "x", thread_id=9, reply_to=topic_root))
    assert gif is not None and spoken is not None and in_topic is not None
    assert gif.text == "look\n\n[attached video: cat.gif, 2 KB]" and gif.mentioned
    assert [a.kind for a in gif.attachments] == ["video"]
    assert spoken.text == "[attached voice: voice.ogg, 3.0 MB]"
    assert (spoken.chat_type, spoken.session_key) == ("dm", "telegram:dm:7")
    assert (in_topic.thread_id, in_topic.reply_to) == ("9", None)
    assert in_topic.session_key == "telegram:group:-100:9"


async def test_command_registration_failure_is_not_fatal(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    tg.fail_next("setMyCommands", 400, description="Bad Request: BOT_COMMAND_INVALID")
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, client):
        tg.send_text(555, "hi")
        [reply] = await tg.wait_sent(1, chat_id=555)
        status, _ = await client.get("/readyz")
    assert ("setMyCommands", 400, "Bad Request: BOT_COMMAND_INVALID") in tg.errors
    assert status == 200 and reply["text"] == "echo: hi"
