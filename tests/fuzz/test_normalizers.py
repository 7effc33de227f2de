"""Fuzzing every platform's intake with random and truncated payloads: the normalizers never
raise, and what they accept is a well-formed `MessageEvent`.

Telegram and Slack: hypothesis over the pure functions (`parse_updates`, python-telegram-bot's
parser + `normalize`; Slack's `normalize`). Discord's messages only exist inside discord.py's
client, so seeded mutations of MESSAGE_CREATE go through the fake gateway to a running adapter.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from adapters.slack.inbound import normalize as slack_normalize
from adapters.telegram.normalize import normalize as telegram_normalize
from adapters.telegram.poller import parse_updates
from hermes_gateway.events import CHAT_TYPES, MessageEvent
from hermes_gateway.platforms.intake import BotIdentity
from tests.fakes.discord import FakeDiscord
from tests.fakes.discord_payloads import make_attachment, make_message, make_user, snowflake
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import make_message_event
from tests.fakes.telegram import (
    make_chat,
    make_update,
)
from tests.fakes.telegram import (
    make_message as tg_message,
)
from tests.fakes.telegram import (
    make_user as tg_user,
)
from tests.fuzz.strategies import JSON, examples, mutate, mutated
from tests.harness import eventually, make_config, running_gateway

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
FUZZ = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def well_formed(event: MessageEvent, platform: str) -> None:
    assert event.platform == platform
    assert event.chat_type in CHAT_TYPES
    for value in (event.chat_id, event.user_id, event.message_id, event.text, event.user_name):
        assert isinstance(value, str)
    # an empty text is possible (Slack): `Gateway.submit` drops it as "empty"
    assert event.session_key.startswith(f"{platform}:{event.chat_type}:{event.chat_id}")


# -- Telegram ---------------------------------------------------------------------------------

ALICE, BOT = tg_user(555, "alice"), tg_user(123, "hermes_bot", "Hermes", is_bot=True)
GROUP = make_chat(-100123, "supergroup", is_forum=True)
TELEGRAM_BASES: list[dict[str, Any]] = [
    make_update(1, "message", tg_message(7, make_chat(555), ALICE, "hello /stop @hermes_bot")),
    make_update(2, "message", tg_message(8, GROUP, ALICE, "@hermes_bot in a topic", thread_id=5)),
    make_update(
        3,
        "message",
        tg_message(9, GROUP, ALICE, "and this?", reply_to=tg_message(4, GROUP, BOT, "earlier")),
    ),
    make_update(
        4,
        "message",
        tg_message(
            10,
            make_chat(555),
            ALICE,
            caption="a file 😀",
            document={"file_id": "d", "file_unique_id": "u", "file_name": "a.txt"},
            caption_entities=[{"type": "mention", "offset": 40, "length": 9}],
        ),
    ),
    make_update(5, "edited_message", tg_message(11, make_chat(555), ALICE, "edited", edit_date=1)),
]
ME = BotIdentity("123", "hermes_bot")


@FUZZ
@given(update=st.sampled_from(TELEGRAM_BASES).flatmap(mutated) | JSON)
def test_telegram_any_update_is_parsed_or_skipped_never_raises(update: Any) -> None:
    for parsed, _uid in parse_updates(json.loads(json.dumps([update])), None):
        if parsed is None:
            continue  # python-telegram-bot could not parse it: logged, confirmed, dropped
        for per_user in (True, False):
            inbound = telegram_normalize(parsed, ME, per_user=per_user)
            if inbound is not None:
                well_formed(inbound.event, "telegram")


@FUZZ
@given(batch=st.lists(st.sampled_from(TELEGRAM_BASES).flatmap(mutated) | JSON, max_size=6))
def test_telegram_a_batch_with_junk_keeps_every_usable_update(batch: list[Any]) -> None:
    ids = [uid for _update, uid in parse_updates(json.loads(json.dumps(batch)), None)]
    usable = [
        u["update_id"]
        for u in batch
        if isinstance(u, dict)
        and isinstance(u.get("update_id"), int)
        and not isinstance(u.get("update_id"), bool)
    ]
    assert ids == usable  # each one moves the offset (parsed or not), none is lost


# -- Slack --------------------------------------------------------------------------------------

SLACK_BASES: list[dict[str, Any]] = [
    make_message_event(
        "hi <@U0BOT> see <https://e.com|this> &amp; <#C1|general>", "U1", "C1", "1.1"
    ),
    make_message_event("in a dm", "U1", "D1", "1.2", channel_type="im"),
    make_message_event("threaded", "U1", "C1", "1.3", thread_ts="1.1"),
    make_message_event(
        "with a file",
        "U1",
        "C1",
        "1.4",
        files=[{"id": "F1", "name": "a.png", "mimetype": "image/png", "size": 3}],
    ),
    {"type": "app_mention", "user": "U1", "channel": "C1", "ts": "1.5", "text": "<@U0BOT> hey"},
]
SLACK_ME = BotIdentity("U0BOT", bot_id="B0BOT")


@FUZZ
@given(raw=st.sampled_from(SLACK_BASES).flatmap(mutated) | JSON)
def test_slack_any_event_is_normalized_or_ignored_never_raises(raw: Any) -> None:
    for per_user in (True, False):
        inbound = slack_normalize(raw, SLACK_ME, per_user=per_user)
        if inbound is not None:
            well_formed(inbound.event, "slack")


# -- Discord ------------------------------------------------------------------------------------

DISCORD_TOKEN = "MTAwMDAw.fuzz-discord-token.0123456789abcdef"
ALICE_ID, BOT_ID, GUILD_ID, CHANNEL_ID = 42, 1000, 2000, 3000


def discord_bases() -> list[dict[str, Any]]:
    alice, bot = make_user(ALICE_ID, "alice"), make_user(BOT_ID, "hermes", bot=True)
    earlier = make_message(snowflake(), CHANNEL_ID, bot, "earlier", guild_id=GUILD_ID)
    return [
        make_message(
            snowflake(), CHANNEL_ID, alice, f"<@{BOT_ID}> hello", guild_id=GUILD_ID, mentions=[bot]
        ),
        make_message(
            snowflake(),
            CHANNEL_ID,
            alice,
            "a reply",
            guild_id=GUILD_ID,
            message_reference={"message_id": earlier["id"], "channel_id": str(CHANNEL_ID)},
            referenced_message=earlier,
        ),
        make_message(
            snowflake(),
            CHANNEL_ID,
            alice,
            f"<@{BOT_ID}> look",
            guild_id=GUILD_ID,
            mentions=[bot],
            attachments=[make_attachment("a.txt", url="http://127.0.0.1:9/a.txt", size=5)],
        ),
    ]


async def test_discord_mutated_messages_never_break_the_adapter(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    rng = random.Random(9)
    fake = FakeDiscord(token=DISCORD_TOKEN, bot_id=BOT_ID, guild_id=GUILD_ID, channel_id=CHANNEL_ID)
    fake.start()
    section = {
        "enabled": True,
        "token": DISCORD_TOKEN,
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        "allowed_users": [ALICE_ID],
        "guild_ready_timeout_s": 0.02,
        "identify_delay_s": 0,
        "sync_commands": False,
    }
    try:
        config = make_config(tmp_path, fake_llm.base_url, platforms={"discord": section})
        with capture_logs() as logs:
            async with running_gateway(config) as (gw, _):
                adapter: Any = gw.adapters["discord"]
                await eventually(lambda: adapter.health().ready, 10)
                for _ in range(120):
                    fake.dispatch("MESSAGE_CREATE", mutate(rng.choice(discord_bases()), rng))
                fake.send_dm("sentinel", user_id=ALICE_ID)
                await eventually(
                    lambda: any(m["content"] == "echo: sentinel" for m in fake.sent), 20
                )
                await asyncio.sleep(0.2)
                disconnects = adapter.disconnects
    finally:
        fake.stop()
    failures = [e for e in logs if e["event"] in ("discord.message_failed", "run.crashed")]
    assert failures == []
    assert disconnects == 0
