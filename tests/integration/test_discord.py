"""Discord conversations through the real discord.py against `FakeDiscord`: DMs, mention gating,
threads, sessions, long answers, slash and plain-text commands, access rules, attachments."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_gateway.core.commands import HELP, Commands, menu
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import make_member, make_message, make_user, snowflake
from tests.fakes.openai import FakeOpenAI, text
from tests.harness import eventually
from tests.integration.test_discord_kit import (
    ALICE,
    BOB,
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    STRANGER,
    Received,
    answered,
    asked,
    bot_posts,
    discord_config,
    discord_gateway,
    fake_discord,
    referenced_id,
)


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        yield fake


async def test_dm_is_answered_with_a_reply_to_the_message(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (gw, *_):
        received = Received(gw)
        dm = fake.send_dm("hello there", user_id=ALICE)
        (reply,) = await answered(fake, 1)
    assert reply["content"] == "echo: hello there"
    assert reply["channel_id"] == dm["channel_id"]
    assert referenced_id(reply) == dm["id"]
    assert asked(fake_llm) == ["hello there"]
    (event,) = received.events
    assert (event.chat_type, event.user_id, event.user_name) == ("dm", str(ALICE), "alice")
    assert event.session_key == f"discord:dm:{dm['channel_id']}"


async def test_guild_messages_are_answered_only_when_the_bot_is_mentioned(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        fake.send_message("talking among ourselves", user_id=ALICE)
        mention = fake.send_message("what is 2+2?", user_id=ALICE, mentions_bot=True)
        (reply,) = await answered(fake, 1)
    assert mention["content"] == f"<@{BOT_ID}> what is 2+2?"
    assert asked(fake_llm) == ["what is 2+2?"]  # not addressed: ignored; mention stripped
    assert (reply["content"], referenced_id(reply)) == ("echo: what is 2+2?", mention["id"])
    assert reply["channel_id"] == str(CHANNEL_ID)


async def test_a_reply_to_the_bot_counts_as_addressing_it(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        fake.send_message("first", user_id=ALICE, mentions_bot=True)
        (bot_reply,) = await answered(fake, 1)
        # a reply without the @ping: no mention in the payload, only the reference
        alice = make_user(ALICE, "alice")
        reply = make_message(
            snowflake(),
            CHANNEL_ID,
            alice,
            "and then?",
            guild_id=GUILD_ID,
            member=make_member(),
            message_reference={"message_id": bot_reply["id"], "channel_id": str(CHANNEL_ID)},
            referenced_message=bot_reply,
        )
        fake.dispatch("MESSAGE_CREATE", reply)
        await answered(fake, 2)
    assert asked(fake_llm) == ["first", "and then?"]
    assert referenced_id(bot_posts(fake)[1]) == reply["id"]


async def test_guild_sessions_are_per_user_and_threads_are_shared(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (gw, *_):
        received = Received(gw)
        fake.send_message("alice here", user_id=ALICE, mentions_bot=True)
        await answered(fake, 1)
        fake.send_message("bob here", user_id=BOB, username="bob", mentions_bot=True)
        await answered(fake, 2)
        thread_id = fake.create_thread(name="topic")
        fake.send_message("in thread", user_id=ALICE, thread_id=thread_id, mentions_bot=True)
        await answered(fake, 1, thread_id)
        fake.send_message("me too", user_id=BOB, thread_id=thread_id, mentions_bot=True)
        in_thread = await answered(fake, 2, thread_id)
    keys = [e.session_key for e in received.events]
    assert keys == [
        f"discord:group:{CHANNEL_ID}:{ALICE}",
        f"discord:group:{CHANNEL_ID}:{BOB}",
        f"discord:thread:{CHANNEL_ID}:{thread_id}",
        f"discord:thread:{CHANNEL_ID}:{thread_id}",
    ]
    bob_in_channel, bob_in_thread = fake_llm.requests[1], fake_llm.requests[3]
    assert [m["content"] for m in bob_in_channel["messages"][1:]] == ["bob here"]
    assert [m["content"] for m in bob_in_thread["messages"][1:]] == [
        "in thread",
        "echo: in thread",
        "me too",
    ]
    assert [m["content"] for m in in_thread] == ["echo: in thread", "echo: me too"]
    assert len(bot_posts(fake, CHANNEL_ID)) == 2  # nothing from the thread leaked out


async def test_one_session_per_channel_when_configured_and_bot_threads_need_no_mention(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    runner = {"group_sessions_per_user": False}
    config = discord_config(tmp_path, fake_llm.base_url, fake, runner=runner)
    async with discord_gateway(config) as (gw, *_):
        received = Received(gw)
        fake.send_message("alice here", user_id=ALICE, mentions_bot=True)
        await answered(fake, 1)
        fake.send_message("bob here", user_id=BOB, username="bob", mentions_bot=True)
        await answered(fake, 2)
        own_thread = fake.create_thread(name="with hermes", owner_id=BOT_ID)
        fake.send_message("no mention needed here", user_id=ALICE, thread_id=own_thread)
        await answered(fake, 1, own_thread)
    assert [e.session_key for e in received.events] == [
        f"discord:group:{CHANNEL_ID}",
        f"discord:group:{CHANNEL_ID}",
        f"discord:thread:{CHANNEL_ID}:{own_thread}",
    ]
    assert [m["content"] for m in fake_llm.requests[1]["messages"][1:]] == [
        "alice here",
        "echo: alice here",
        "bob here",
    ]


async def test_a_5000_character_answer_arrives_whole_in_fence_safe_parts(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    code = "\n".join(f"print({i})  # a line of code" for i in range(60))
    prose = " ".join(f"word{i}" for i in range(500))
    answer = f"Intro.\n\n```python\n{code}\n```\n\n{prose}\n\n```\n{code}\n```\nEnd."
    assert len(answer) >= 5000
    fake_llm.push(text(answer))
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        question = fake.send_dm("write a lot", user_id=ALICE)
        await eventually(lambda: "End." in "".join(m["content"] for m in fake.sent))
        parts = bot_posts(fake)
    assert len(parts) >= 3
    assert all(len(p["content"]) <= 2000 for p in parts)
    assert [referenced_id(p) for p in parts] == [question["id"]] + [None] * (len(parts) - 1)
    for part in parts:
        assert part["content"].count("```") % 2 == 0, part["content"]
    joined = "".join(p["content"] for p in parts)
    assert re.findall(r"word\d+", joined) == [f"word{i}" for i in range(500)]
    assert re.findall(r"print\((\d+)\)", joined) == [str(i) for i in range(60)] * 2


async def test_slash_commands_are_synced_and_answered_through_the_interaction(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    config = discord_config(tmp_path, fake_llm.base_url, fake, sync_commands=True)
    async with discord_gateway(config):
        await eventually(lambda: len(fake.commands) == len(Commands.NAMES))
        fake.send_interaction("status", user_id=ALICE)
        await eventually(lambda: len(fake.interaction_responses) == 2)
        fake.send_interaction("queue", user_id=ALICE, options={"message": "queued work"})
        await eventually(lambda: len(fake.interaction_responses) == 4)
        fake.send_interaction("help", user_id=ALICE, guild=False)
        await eventually(lambda: len(fake.interaction_responses) == 6)
    assert {c["name"]: c["description"] for c in fake.commands} == {
        c.name: c.description for c in menu()
    }
    options = {c["name"]: [o["name"] for o in c.get("options", [])] for c in fake.commands}
    assert options["queue"] == options["steer"] == ["message"]
    defer, status, defer2, queued, _defer3, help_reply = fake.interaction_responses
    assert help_reply["content"] == HELP
    assert (defer["kind"], defer["type"], status["kind"]) == ("callback", 5, "followup")
    assert f"Session: discord:group:{CHANNEL_ID}:{ALICE}" in status["content"]
    assert (defer2["type"], queued["content"]) == (5, "echo: queued work")
    assert fake.sent == []  # answers went through the interactions, not as channel posts
    assert asked(fake_llm) == ["queued work"]


async def test_slash_stop_stops_a_slow_run(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    words = " ".join(f"w{i}" for i in range(100))
    fake_llm.push(text(words, chunk_size=3, chunk_delay=0.05))  # a 2 s streamed answer
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        fake.send_message("long job", user_id=ALICE, mentions_bot=True)
        await eventually(lambda: len(fake_llm.requests) == 1)
        fake.send_interaction("stop", user_id=ALICE)
        await eventually(lambda: len(fake.interaction_responses) == 2)
        fake.send_message("still there?", user_id=ALICE, mentions_bot=True)
        (after,) = await answered(fake, 1)
    assert fake.interaction_responses[1]["content"] == "Stopped."
    assert after["content"] == "echo: still there?"


async def test_plain_text_commands_in_a_dm_and_with_a_mention(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        dm = fake.send_dm("/help", user_id=ALICE)
        await answered(fake, 1)
        fake.send_message("/status", user_id=ALICE)  # not addressed in a guild channel
        fake.send_message("/status", user_id=ALICE, mentions_bot=True)
        help_reply, status = await answered(fake, 2)
    assert (help_reply["content"], referenced_id(help_reply)) == (HELP, dm["id"])
    assert status["content"].startswith(f"Session: discord:group:{CHANNEL_ID}:{ALICE}")
    assert len(bot_posts(fake)) == 2
    assert fake_llm.requests == []


async def test_bots_and_the_bot_itself_are_ignored_unless_bots_are_allowed(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        fake.send_message("beep", user_id=ALICE, author_bot=True, mentions_bot=True)
        own = make_message(
            snowflake(), CHANNEL_ID, fake.bot_user, f"<@{BOT_ID}> me", guild_id=GUILD_ID
        )
        fake.dispatch("MESSAGE_CREATE", own)
        fake.send_dm("a person", user_id=BOB)
        await answered(fake, 1)
    assert asked(fake_llm) == ["a person"]  # also: the echo of our own reply was not taken


async def test_allow_bots_lets_other_bots_talk(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    config = discord_config(tmp_path, fake_llm.base_url, fake, allow_bots=True)
    async with discord_gateway(config):
        fake.send_message("beep", user_id=ALICE, author_bot=True, mentions_bot=True)
        await answered(fake, 1)
    assert asked(fake_llm) == ["beep"]


async def test_unknown_users_get_silence_or_a_pairing_code(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)):
        stranger = fake.send_dm("let me in", user_id=STRANGER, username="mallory")
        fake.send_message("me too", user_id=STRANGER, username="mallory", mentions_bot=True)
        fake.send_interaction("status", user_id=STRANGER, username="mallory")
        fake.send_dm("hi", user_id=ALICE)
        (reply,) = await answered(fake, 1)
    assert asked(fake_llm) == ["hi"]
    assert fake.interaction_responses == []
    assert reply["channel_id"] != stranger["channel_id"]

    (tmp_path / "p").mkdir()
    with fake_discord() as paired:
        config = discord_config(tmp_path / "p", fake_llm.base_url, paired, pairing=True)
        async with discord_gateway(config):
            dm = paired.send_dm("let me in", user_id=STRANGER, username="mallory")
            (code,) = await answered(paired, 1)
    assert code["channel_id"] == dm["channel_id"]
    assert "hermes pairing approve discord" in code["content"]
    assert asked(fake_llm) == ["hi"]


async def test_attachments_become_attachments_and_are_described(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    upload = {"filename": "notes.txt", "data": b"hello", "content_type": "text/plain"}
    picture = {"filename": "cat.png", "data": b"\x89PNG", "content_type": "image/png"}
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, fake)) as (gw, *_):
        received = Received(gw)
        fake.send_dm("see these", user_id=ALICE, attachments=[upload, picture])
        await answered(fake, 1)
        fake.send_dm("", user_id=ALICE, attachments=[picture])
        await answered(fake, 2)
    first, only_file = received.events
    assert [(a.kind, a.name, a.mime_type, a.size) for a in first.attachments] == [
        ("document", "notes.txt", "text/plain", 5),
        ("image", "cat.png", "image/png", 4),
    ]
    assert first.attachments[0].url.startswith(fake.url)
    assert first.text.startswith("see these\n[attached document: notes.txt (text/plain, 5 bytes)")
    assert only_file.text.startswith("[attached image: cat.png")
