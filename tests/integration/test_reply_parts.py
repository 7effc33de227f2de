"""A reply in three parts whose second part meets an outage longer than the adapter's retries:
delivered as parts 1, 2, 3 exactly once each on Telegram, Discord and Slack (real SDKs against
the fakes), never from part 1 again. And at the next start, a reply a crash cut short between
parts is sent from its first undelivered part."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from adapters.telegram import sending as telegram_delivery
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.retry import with_retry
from hermes_gateway.store.store import Store
from tests.fakes.discord import ApiError as DiscordApiError
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import ApiError, FakeTelegram, plain_text
from tests.harness import dm, eventually, running_gateway
from tests.integration.test_discord_kit import ALICE, bot_posts, discord_config, discord_gateway
from tests.integration.test_discord_kit import fake_discord as discord_fake
from tests.integration.test_slack import slack_config, started, texts
from tests.integration.test_telegram import TOKEN, tg_config
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


def answer(words_per_part: int) -> str:
    """Three paragraphs, each too long to share a message with another: three parts."""
    return "\n\n".join(
        f"part{n} " + " ".join(f"w{n}x{j}" for j in range(words_per_part)) for n in (1, 2, 3)
    )


def firsts(messages: list[str]) -> list[str]:
    return [m.split()[0] for m in messages]


@pytest.fixture(autouse=True)
def quick_redelivery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Delivery, "redeliver_delays", (0.1,))


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    with discord_fake() as fake:
        yield fake


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


async def test_telegram_resumes_at_the_part_that_failed(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(telegram_delivery, "with_retry", partial(with_retry, base_delay=0.01))
    name, send = tg._methods["sendmessage"]
    outage = 7  # the adapter's five attempts, then two redeliveries

    async def part_two_down(params: dict[str, Any]) -> Any:
        nonlocal outage
        if params["text"].startswith("part2") and outage:
            outage -= 1
            raise ApiError(503, "Service Unavailable")
        return await send(params)

    tg._methods["sendmessage"] = (name, part_two_down)
    fake_llm.push(text(answer(400)))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        update = tg.send_text(555, "three parts please")
        await tg.wait_sent(3, chat_id=555, timeout=15)
        await eventually(lambda: not gw.runner.busy("telegram:dm:555"))
        await asyncio.sleep(0.3)  # a part sent twice would land by now
    sent = tg.messages_to(555)
    assert outage == 0
    assert firsts([plain_text(m["text"], m["parse_mode"]) for m in sent]) == [
        "part1",
        "part2",
        "part3",
    ]
    quoted = [(m["reply_parameters"] or {}).get("message_id") for m in sent]
    assert quoted == [update["message"]["message_id"], None, None]


async def test_discord_resumes_at_the_part_that_failed(
    tmp_path: Path, fake_llm: FakeOpenAI, discord: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = discord._check_content
    outage = 4  # the adapter's three attempts, then one redelivery

    def part_two_down(body: dict[str, Any]) -> None:
        nonlocal outage
        if str(body.get("content", "")).startswith("part2") and outage:
            outage -= 1  # discord.py raises a 503 at once (it sleeps through 500/502/504)
            raise DiscordApiError(503, 0, "Service Unavailable")
        check(body)

    monkeypatch.setattr(discord, "_check_content", part_two_down)
    fake_llm.push(text(answer(250)))
    async with discord_gateway(discord_config(tmp_path, fake_llm.base_url, discord)) as (gw, _, _a):
        discord.send_dm("three parts please", user_id=ALICE)
        await eventually(lambda: len(bot_posts(discord)) >= 3, timeout=15)
        await eventually(lambda: not gw.runner.counts()["active"])
        await asyncio.sleep(0.3)
    posts = bot_posts(discord)
    assert outage == 0
    assert all(len(p["content"]) <= 2000 for p in posts)
    assert firsts([p["content"] for p in posts]) == ["part1", "part2", "part3"]


async def test_slack_resumes_at_the_part_that_failed(
    tmp_path: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    post = slack._methods["chat.postMessage"]

    def part_two_down(params: dict[str, Any]) -> dict[str, Any]:
        result = post(params)
        if len(slack.posted) == 1:  # part 2 then meets an outage: two attempts + a redelivery
            slack.fail_next("chat.postMessage", status=503, times=3)
        return result

    slack._methods["chat.postMessage"] = part_two_down
    fake_llm.push(text("\n\n".join(f"part{i} " + "x" * 150 for i in (1, 2, 3))))
    async with started(slack_config(tmp_path, fake_llm, slack, message_limit=200)) as (gw, _):
        gw.adapters["slack"].web.attempts = 2  # type: ignore[attr-defined]
        slack.send_message("three parts please", channel="D1")
        await eventually(lambda: len(texts(slack, "D1")) >= 3, timeout=15)
        await eventually(lambda: not gw.runner.counts()["active"])
        await asyncio.sleep(0.3)
    assert firsts(texts(slack, "D1")) == ["part1", "part2", "part3"]
    assert len(slack.calls_to("chat.postMessage")) == 3 + 3


# -- the next start ------------------------------------------------------------------------------


def left_over(message_id: str, received_at: float = 0.0) -> MessageEvent:
    return dm(
        message_id,
        f"question {message_id}",
        **({"received_at": received_at} if received_at else {}),
    )


async def crashed_between_parts(
    store_url: str, events: list[MessageEvent], reply: str, parts_sent: int
) -> list[int]:
    """The inbox a kill leaves when ``reply`` was stored and ``parts_sent`` parts went out."""
    store = Store(store_url)
    await store.open()
    try:
        ids = [i for ev in events if (i := await store.accept(ev)) is not None]
        await store.complete_turn(events[0].session_key, [], ids, reply, "run-before")
        if parts_sent:
            await store.progress(ids, parts_sent)
    finally:
        await store.close()
    return ids


async def test_a_reply_cut_short_between_parts_is_finished_from_the_next_part(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg)
    await crashed_between_parts(config.store_url, [left_over("7")], answer(400), parts_sent=1)
    async with running_gateway(config) as (gw, _):
        await tg.wait_sent(2, chat_id=555, timeout=10)
        await asyncio.sleep(0.3)
        _to_run, to_send = await gw.store.replayable(3600)
    sent = tg.messages_to(555)
    assert firsts([plain_text(m["text"], m["parse_mode"]) for m in sent]) == ["part2", "part3"]
    assert all(m["reply_parameters"] is None for m in sent)  # part 1 was the quoting one
    assert fake_llm.requests == []  # sent again, not computed again
    assert to_send == []  # answered


async def test_a_merged_reply_is_replayed_once_for_all_its_messages(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    config = tg_config(tmp_path, fake_llm, tg)
    events = [left_over("7", 1000.0), left_over("8", 1001.0)]
    await crashed_between_parts(config.store_url, events, "one answer to both", parts_sent=0)
    async with running_gateway(config) as (gw, _):
        await tg.wait_sent(1, chat_id=555, timeout=10)
        await asyncio.sleep(0.3)
        _to_run, to_send = await gw.store.replayable(3600)
    [reply] = tg.messages_to(555)
    assert reply["text"] == "one answer to both"
    assert to_send == []
