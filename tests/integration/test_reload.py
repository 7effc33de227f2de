"""SIGHUP reaches every part that reads the config: on Telegram, Discord and Slack, a reload
toggling `require_mention` and changing `allowed_users` takes effect on the next group or
channel message, and the log level changes. `Gateway.serve` runs in the test's loop with its
signal handlers, the real SDKs against the fakes; the signal is a real SIGHUP."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from hermes_gateway.config import Config
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram
from tests.harness import eventually
from tests.integration.test_discord_kit import ALICE, BOB, answered, asked, discord_config
from tests.integration.test_discord_kit import fake_discord as fake_discord_running
from tests.integration.test_slack import slack_config
from tests.integration.test_slack import texts as slack_texts
from tests.integration.test_telegram import TOKEN, tg_config, user_texts
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
GROUP = -100
ROBOT = 77


@pytest.fixture(autouse=True)
def log_level() -> Iterator[None]:
    """A reload sets the root logger's level: put it back for the tests after this one."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@asynccontextmanager
async def serving(config: Config) -> AsyncIterator[Gateway]:
    """`Gateway.serve` as `hermes gateway run` runs it (its SIGHUP handler installed), with
    every adapter connected; stopped as SIGTERM would stop it."""
    gw = Gateway(config, str(config.home_path.parent / "config.yaml"))
    task = asyncio.create_task(gw.serve())
    try:
        adapters = gw.adapters
        await eventually(
            lambda: len(adapters) > 1 and all(a.health().ready for a in adapters.values()), 20
        )
        yield gw
    finally:
        gw.handle_exit()
        await task


async def sighup(gw: Gateway, platform: str, **section: Any) -> None:
    """Edit ``platform``'s section in the config file, set the log level to debug, SIGHUP."""
    assert gw.config_path is not None
    path = Path(gw.config_path)
    data = yaml.safe_load(path.read_text())
    data["platforms"][platform].update(section)
    data["logging"]["level"] = "debug"
    path.write_text(yaml.safe_dump(data))
    before = gw.config
    os.kill(os.getpid(), signal.SIGHUP)
    await eventually(lambda: gw.config is not before)


def level() -> int:
    return logging.getLogger().level


async def test_telegram_group_follows_a_reload(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    group: dict[str, Any] = {"chat_type": "supergroup"}
    with FakeTelegram(token=TOKEN) as tg:
        config = tg_config(tmp_path, fake_llm, tg, allow_all=False, allowed_users=["7"])
        async with serving(config) as gw:
            tg.send_text(GROUP, "among ourselves", user_id=7, **group)
            tg.send_text(GROUP, "@hermes_bot before", user_id=7, **group)
            await tg.wait_sent(1, chat_id=GROUP)
            await sighup(gw, "telegram", require_mention=False, allowed_users=["8"])
            tg.send_text(GROUP, "@hermes_bot from seven", user_id=7, **group)  # no longer allowed
            tg.send_text(GROUP, "no mention needed", user_id=8, **group)
            await tg.wait_sent(2, chat_id=GROUP)
    assert user_texts(fake_llm) == ["before", "no mention needed"]
    assert level() == logging.DEBUG


async def test_discord_channel_follows_a_reload(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    with fake_discord_running() as fake:
        config = discord_config(tmp_path, fake_llm.base_url, fake, allowed_users=[str(ALICE)])
        async with serving(config) as gw:
            fake.send_message("among ourselves", user_id=ALICE)
            fake.send_message("before", user_id=ALICE, mentions_bot=True)
            await answered(fake, 1)
            # allow_bots is not one SIGHUP takes: the config in force keeps what runs
            allowed = [str(BOB), str(ROBOT)]
            await sighup(
                gw, "discord", require_mention=False, allowed_users=allowed, allow_bots=True
            )
            fake.send_message("from alice", user_id=ALICE, mentions_bot=True)  # no longer allowed
            fake.send_message("from a bot", user_id=ROBOT, username="robot", author_bot=True)
            fake.send_message("no mention needed", user_id=BOB, username="bob")
            await answered(fake, 2)
            in_force = gw.config.platforms.discord
    assert asked(fake_llm) == ["before", "no mention needed"]
    assert (in_force.require_mention, in_force.allow_bots) == (False, False)
    assert level() == logging.DEBUG


async def test_slack_thread_rule_and_access_agree_after_a_reload(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The bug this guards: the adapter kept the `require_mention` it started with, so after a
    reload turning it on, a reply in a thread the bot answers in (which needs no mention) was
    refused by the access rules that had the new value."""
    alice, bob = "U123", "U456"
    with FakeSlack() as slack:
        config = slack_config(tmp_path, fake_llm, slack, require_mention=False)
        async with serving(config) as gw:
            top = slack.send_message("anyone?", channel="C1")["event"]["ts"]
            await eventually(lambda: len(slack.messages_in("C1", thread_ts=top)) == 1)
            await sighup(gw, "slack", require_mention=True, allowed_users=[bob])
            slack.send_message("plain, no mention", user=bob, channel="C1")
            slack.send_mention("<@U0BOT> from alice", user=alice, channel="C1")
            slack.send_message("in the thread", user=bob, channel="C1", thread_ts=top)
            await eventually(lambda: len(slack.messages_in("C1", thread_ts=top)) == 2)
            slack.send_message("sentinel", user=bob, channel="D999")
            await eventually(lambda: slack.messages_in("D999"))
    assert slack_texts(slack, "C1", top) == ["echo: anyone?", "echo: in the thread"]
    assert user_texts(fake_llm) == ["anyone?", "in the thread", "sentinel"]
    assert len(slack.messages_in("C1")) == 2  # both in the thread: nothing else answered
    assert level() == logging.DEBUG
