"""Platform faults: Telegram 429 storms, 5xx (JSON and HTML), an API that goes away and comes
back, a long poll that never returns; a Discord socket that dies and a Slack socket told to
disconnect, each in the middle of a conversation. The adapter heals by itself, `/readyz` says
what is wrong meanwhile, and every message is answered exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.core.delivery import Delivery
from tests.chaos.kit import ChaosTelegram, record, telegram_config
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.slack import FakeSlack
from tests.harness import Client, eventually, make_config, running_gateway
from tests.security import keys

pytestmark = [
    pytest.mark.usefixtures("fast_telegram"),
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]


async def readyz(client: Client) -> tuple[int, list[str]]:
    status, body = await client.get("/readyz")
    return status, body.get("reasons", []) if isinstance(body, dict) else []


class ReadyWatch:
    """Samples `/readyz` every 20 ms: what it said while a fault lasted."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.reasons: list[str] = []
        self.down_since: float | None = None
        self.seconds_down = 0.0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            status, reasons = await readyz(self.client)
            now = time.monotonic()
            if status != 200:
                self.reasons += [r for r in reasons if r not in self.reasons]
                self.down_since = self.down_since or now
            elif self.down_since is not None:
                self.seconds_down += now - self.down_since
                self.down_since = None
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        assert time.monotonic() < deadline, f"not true within {timeout}s"
        await asyncio.sleep(0.02)
    return value


# -- Telegram ---------------------------------------------------------------------------------

SLOW = pytest.mark.slow
SEND_STORMS = {
    "429 x3 (retry_after 1 s)": {"status": 429, "retry_after": 1, "times": 3},
    "500 x3": {"status": 500, "times": 3},
    "502 HTML page x3": {"status": 502, "times": 3, "raw_body": "<html>Bad Gateway</html>"},
    "503 x7 (past the retry budget)": {"status": 503, "times": 7},
}


@pytest.mark.parametrize(
    "storm",
    [pytest.param(name, marks=[] if "past" in name else [SLOW]) for name in SEND_STORMS],
)
async def test_telegram_send_storm_the_answer_still_arrives_once(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, storm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outage longer than the adapter's retries left the reply for the next restart: the
    user heard nothing until then. Now it is offered again while the process lives."""
    monkeypatch.setattr(Delivery, "redeliver_delays", (0.3, 1.0))
    async with running_gateway(telegram_config(tmp_path, llm, tg)) as (gw, _):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        tg.fail_next("sendMessage", **SEND_STORMS[storm])
        started = time.monotonic()
        tg.send_text(1001, "through the storm")
        await tg.wait_sent(1, chat_id=1001, timeout=30)
        seconds = time.monotonic() - started
        tg.send_text(1001, "and after it")
        await tg.wait_sent(2, chat_id=1001, timeout=10)
        await asyncio.sleep(0.3)
    texts = [m["text"] for m in tg.messages_to(1001)]
    record(
        f"platform_telegram_send_{_slug(storm)}",
        {
            "fault": f"Telegram sendMessage {storm}",
            "answered": texts.count("echo: through the storm"),
            "seconds": round(seconds, 2),
        },
    )
    assert texts == ["echo: through the storm", "echo: and after it"]


GET_UPDATES_FAULTS = {
    "429 x3": {"status": 429, "retry_after": 1, "times": 3},
    "502 HTML page x4": {"status": 502, "times": 4, "raw_body": "<html>Bad Gateway</html>"},
    "500 x4": {"status": 500, "times": 4},
}


@SLOW
@pytest.mark.parametrize("fault", list(GET_UPDATES_FAULTS))
async def test_telegram_polling_errors_show_in_readyz_and_heal(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, fault: str
) -> None:
    async with running_gateway(telegram_config(tmp_path, llm, tg)) as (gw, client):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        watch = ReadyWatch(client)
        tg.fail_next("getUpdates", **GET_UPDATES_FAULTS[fault])
        tg.send_text(1001, "sent during the errors")
        await tg.wait_sent(1, chat_id=1001, timeout=30)
        await until(lambda: _ready(client))
        await watch.stop()
    record(
        f"platform_telegram_poll_{_slug(fault)}",
        {
            "fault": f"Telegram getUpdates {fault}",
            "readyz": watch.reasons[:1],
            "answered": len(tg.messages_to(1001)),
        },
    )
    assert any("polling failing" in r for r in watch.reasons), watch.reasons
    assert [m["text"] for m in tg.messages_to(1001)] == ["echo: sent during the errors"]


@SLOW
async def test_telegram_goes_away_and_comes_back(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram
) -> None:
    """Connections refused, then reset: the API is down for two seconds."""
    async with running_gateway(telegram_config(tmp_path, llm, tg)) as (gw, client):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        tg.send_text(1001, "before")
        await tg.wait_sent(1, chat_id=1001)
        watch = ReadyWatch(client)
        tg.stop()
        await until(lambda: _not_ready(client), timeout=15)
        await asyncio.sleep(2)
        back = tg.successor()
        try:
            back.send_text(1001, "after")
            [reply] = await back.wait_sent(1, chat_id=1001, timeout=45)
            await until(lambda: _ready(client))
        finally:
            await watch.stop()
            back.stop()
    record(
        "platform_telegram_down",
        {"fault": "Telegram unreachable for 2 s", "readyz": watch.reasons[:1], "answered": 1},
    )
    assert any("polling" in r for r in watch.reasons), watch.reasons
    assert reply["text"] == "echo: after"


@SLOW
async def test_telegram_long_poll_that_never_returns(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TelegramAdapter, "request_timeout", 1.0)
    monkeypatch.setattr(TelegramAdapter, "stall_grace", 0.2)
    async with running_gateway(telegram_config(tmp_path, llm, tg)) as (gw, client):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        watch = ReadyWatch(client)
        tg.stall_get_updates = True
        tg.send_text(1001, "stuck behind a dead poll")
        await until(lambda: _reason(client, "stalled"))
        health = await client.get("/healthz")
        tg.stall_get_updates = False
        [reply] = await tg.wait_sent(1, chat_id=1001, timeout=20)
        await until(lambda: _ready(client))
        await watch.stop()
    record(
        "platform_telegram_stall",
        {"fault": "Telegram long poll never returns", "readyz": watch.reasons[:1], "answered": 1},
    )
    assert health[0] == 200
    assert any("stalled" in r for r in watch.reasons), watch.reasons
    assert reply["text"] == "echo: stuck behind a dead poll"


async def test_telegram_enormous_answer_arrives_whole_in_parts(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram
) -> None:
    paragraph = "Lorem ipsum dolor sit amet, <consectetur> & adipiscing 😀 elit.\n\n"
    answer = paragraph * 3000  # about 200 000 characters
    llm.push(text(answer, chunk_size=65536))
    async with running_gateway(telegram_config(tmp_path, llm, tg)) as (gw, _):
        tg.send_text(1001, "tell me everything")
        await eventually(lambda: not gw.runner.busy("telegram:dm:1001"), 60)
        await asyncio.sleep(0.2)
    parts = [m["text"] for m in tg.messages_to(1001)]
    assert len(parts) > 40
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    unescaped = "".join(
        p.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") for p in parts
    )
    assert unescaped.replace("\n", "") == answer.replace("\n", "")


# -- Discord and Slack -------------------------------------------------------------------------


@pytest.fixture
def discord_fake() -> Iterator[FakeDiscord]:
    fake = FakeDiscord(token=keys.DISCORD_TOKEN, bot_id=1000, guild_id=2000, channel_id=3000)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


async def test_discord_socket_dies_mid_conversation(
    tmp_path: Path, llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    section = {
        "enabled": True,
        "token": keys.DISCORD_TOKEN,
        "api_base": discord_fake.api_base,
        "gateway_url": discord_fake.gateway_url,
        "allowed_users": [42],
        "guild_ready_timeout_s": 0.02,
        "identify_delay_s": 0,
        "sync_commands": False,
    }
    config = make_config(
        tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY}, platforms={"discord": section}
    )
    llm.push(text("answered across the reconnect", delay=1.0))
    async with running_gateway(config) as (gw, client):
        await eventually(lambda: gw.adapters["discord"].health().ready, 10)
        watch = ReadyWatch(client)
        discord_fake.send_dm("a question", user_id=42)
        await eventually(lambda: llm.in_flight > 0)
        discord_fake.drop_socket()  # no close frame, mid-answer
        discord_fake.call_soon(time.sleep, 0.5)  # and Discord is slow to take the new socket
        await eventually(lambda: discord_fake.sent, 15)
        await until(lambda: _ready(client))
        discord_fake.send_dm("still there?", user_id=42)
        await eventually(lambda: len(discord_fake.sent) >= 2, 15)
        await asyncio.sleep(0.3)
        await watch.stop()
    contents = [m["content"] for m in discord_fake.sent]
    record(
        "platform_discord_drop",
        {
            "fault": "Discord socket dropped mid-answer",
            "readyz": watch.reasons[:1],
            "answered": contents.count("answered across the reconnect"),
        },
    )
    assert contents == ["answered across the reconnect", "echo: still there?"]
    assert any("discord" in r for r in watch.reasons), watch.reasons


@pytest.fixture
def slack_fake() -> Iterator[FakeSlack]:
    with FakeSlack(bot_token=keys.SLACK_BOT_TOKEN, app_token=keys.SLACK_APP_TOKEN) as fake:
        yield fake


async def test_slack_socket_disconnect_mid_conversation(
    tmp_path: Path, llm: FakeOpenAI, slack_fake: FakeSlack
) -> None:
    section = {
        "enabled": True,
        "bot_token": keys.SLACK_BOT_TOKEN,
        "app_token": keys.SLACK_APP_TOKEN,
        "api_base": slack_fake.api_base,
        "allowed_users": ["U123"],
        "ping_interval_s": 0.2,
    }
    config = make_config(
        tmp_path, llm.base_url, model={"api_key": keys.MODEL_KEY}, platforms={"slack": section}
    )
    llm.push(text("answered across the disconnect", delay=1.0))
    async with running_gateway(config) as (gw, client):
        await eventually(lambda: gw.adapters["slack"].health().ready, 10)
        watch = ReadyWatch(client)
        slack_fake.send_message("a question", channel="D1")
        await eventually(lambda: llm.in_flight > 0)
        slack_fake.drop_socket()  # the connection dies without a word
        await eventually(lambda: slack_fake.messages_in("D1"), 15)
        await until(lambda: _ready(client))
        slack_fake.disconnect()  # Slack asks for a reconnect ("refresh_requested")
        slack_fake.send_message("still there?", channel="D1")
        await eventually(lambda: len(slack_fake.messages_in("D1")) >= 2, 15)
        await asyncio.sleep(0.3)
        await watch.stop()
    texts = [m["text"] for m in slack_fake.messages_in("D1")]
    record(
        "platform_slack_drop",
        {
            "fault": "Slack socket dropped mid-answer, then disconnect",
            "readyz": watch.reasons[:1],
            "answered": texts.count("answered across the disconnect"),
        },
    )
    assert texts == ["answered across the disconnect", "echo: still there?"]
    assert any("slack" in r for r in watch.reasons), watch.reasons


async def _ready(client: Client) -> bool:
    return (await readyz(client))[0] == 200


async def _reason(client: Client, needle: str) -> bool:
    status, reasons = await readyz(client)
    return status == 503 and any(needle in r for r in reasons)


async def _not_ready(client: Client) -> bool:
    return (await readyz(client))[0] == 503


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")
