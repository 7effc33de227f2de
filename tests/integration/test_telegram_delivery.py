"""Telegram delivery against the real python-telegram-bot and `FakeTelegram`: long answers
split at 4096 UTF-16 units with fences intact, the plain-text retry, flood limits, 5xx and
blocked users, typing, `/stop` during a hung model, and the live preview."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, hang, text
from tests.fakes.telegram import ApiError, FakeTelegram, plain_text, utf16_len
from tests.harness import eventually, running_gateway
from tests.integration.test_telegram import TOKEN, texts, tg_config
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
TOKENS = re.compile(r"word\d+x\d+|value_\d+_\d+")


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def long_answer() -> str:
    """About 12,000 characters of prose and code blocks with characters HTML must escape."""
    blocks = []
    for i in range(36):
        blocks.append(f"Paragraph **{i}**: " + " ".join(f"word{i}x{j}" for j in range(28)))
        if i % 6 == 0:
            lines = [f"value_{i}_{k} = {k} * 2  # <tag> & more" for k in range(30)]
            blocks.append("```python\n" + "\n".join(lines) + "\n```")
    return "\n\n".join(blocks)


async def settled(gw: Gateway, llm: FakeOpenAI, key: str = "telegram:dm:555") -> None:
    """Wait until the model was asked and the run, delivery included, has ended."""
    await eventually(lambda: llm.requests and not gw.runner.busy(key))


def calls(fake: FakeTelegram, method: str) -> int:
    return sum(1 for name, _ in fake.calls if name == method)


async def test_long_answer_arrives_complete_in_parts_with_fences_intact(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    answer = long_answer()
    assert len(answer) > 10_000
    fake_llm.push(text(answer))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        update = tg.send_text(555, "write a lot")
        await settled(gw, fake_llm)
        sent = await tg.wait_sent(3, chat_id=555)
    plains = [plain_text(m["text"], m["parse_mode"]) for m in sent]
    assert all(utf16_len(p) <= 4096 for p in plains)
    for m in sent:
        assert m["parse_mode"] == "HTML"
        assert m["text"].count("<pre>") == m["text"].count("</pre>")  # each part closes its code
    assert TOKENS.findall("".join(plains)) == TOKENS.findall(answer)  # every word, in order
    assert "value_0_0 = 0 * 2  # <tag> & more" in plains[0]
    assert sent[0]["reply_parameters"]["message_id"] == update["message"]["message_id"]
    assert all(m["reply_parameters"] is None for m in sent[1:])


async def test_html_telegram_cannot_parse_is_sent_as_plain_text(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(text("**Bold** and `code` <here>"))
    # PTB rewrites this to "Can't parse entities: ...": the adapter must still recognise it
    tg.fail_next("sendMessage", 400, description="Bad Request: can't parse entities: bad tag")
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        tg.send_text(555, "format something")
        [reply] = await tg.wait_sent(1, chat_id=555)
    assert reply["parse_mode"] is None
    assert reply["text"] == "Bold and code <here>"
    assert calls(tg, "sendMessage") == 2


async def test_flood_limit_on_the_first_send_is_waited_out(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    tg.fail_next("sendMessage", 429, retry_after=1)
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        tg.send_text(555, "hi")
        await eventually(lambda: tg.errors)
        flooded = time.monotonic()
        [reply] = await tg.wait_sent(1, chat_id=555)
        waited = time.monotonic() - flooded
    assert reply["text"] == "echo: hi"
    assert waited >= 0.9  # RetryAfter honoured
    assert calls(tg, "sendMessage") == 2


async def test_server_errors_are_retried_without_resending_earlier_parts(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    name, send = tg._methods["sendmessage"]
    seen = 0

    async def second_part_fails_twice(params: dict[str, Any]) -> Any:
        nonlocal seen
        seen += 1
        if seen in (2, 3):
            raise ApiError(502, "Bad Gateway")
        return await send(params)

    tg._methods["sendmessage"] = (name, second_part_fails_twice)
    fake_llm.push(text(long_answer()))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        tg.send_text(555, "write a lot")
        await settled(gw, fake_llm)
    sent = tg.messages_to(555)
    assert [e[1] for e in tg.errors] == [502, 502]
    assert len(sent) >= 3
    assert len({m["text"] for m in sent}) == len(sent)  # no part delivered twice
    plains = "".join(plain_text(m["text"], m["parse_mode"]) for m in sent)
    assert TOKENS.findall(plains) == TOKENS.findall(long_answer())


async def test_blocked_user_is_logged_once_and_the_session_goes_on(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    tg.fail_next("sendMessage", 403)
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        with capture_logs() as logs:
            tg.send_text(555, "first")
            await settled(gw, fake_llm)
            await eventually(lambda: tg.errors)
            tg.send_text(555, "second")
            [reply] = await tg.wait_sent(1, chat_id=555)
    failures = [e for e in logs if e["event"] == "delivery.permanent_failure"]
    assert len(failures) == 1 and "blocked" in failures[0]["error"]
    assert calls(tg, "sendMessage") == 2  # the 403 was not retried
    assert reply["text"] == "echo: second"


async def test_a_send_answered_without_a_message_id_is_not_sent_again(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    # sends skip PTB's Message parsing, so the adapter itself checks what Telegram answered
    tg.fail_next("sendMessage", 200, raw_body='{"ok": true, "result": true}')
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        with capture_logs() as logs:
            tg.send_text(555, "first")
            await settled(gw, fake_llm)
            await eventually(lambda: any(e["event"] == "delivery.permanent_failure" for e in logs))
            tg.send_text(555, "second")
            [reply] = await tg.wait_sent(1, chat_id=555)
    [failure] = [e for e in logs if e["event"] == "delivery.permanent_failure"]
    assert "without a message id" in failure["error"]
    assert calls(tg, "sendMessage") == 2  # taken by Telegram once: never offered again
    assert reply["text"] == "echo: second"


async def test_typing_is_shown_while_the_model_works_and_stops_with_the_reply(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(text("done", delay=0.6))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        tg.send_text(555, "think hard")
        await tg.wait_sent(1, chat_id=555)
        during = len(tg.chat_actions)
        await asyncio.sleep(0.4)  # four typing intervals: none may come
        after = len(tg.chat_actions)
    assert during >= 3
    assert set(tg.chat_actions) == {(555, "typing")}
    assert after == during


async def test_no_typing_when_it_is_off(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(text("done", delay=0.3))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg, typing=False)) as (gw, _):
        tg.send_text(555, "think")
        await tg.wait_sent(1, chat_id=555)
    assert tg.chat_actions == []


async def test_stop_answers_at_once_while_the_model_hangs(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(hang(3))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg)) as (gw, _):
        tg.send_text(555, "do something slow")
        await eventually(lambda: len(fake_llm.requests) == 1)
        started = time.monotonic()
        tg.send_command(555, "/stop@hermes_bot")
        await tg.wait_sent(1, chat_id=555)
        latency = time.monotonic() - started
        tg.send_text(555, "hi again")
        await tg.wait_sent(2, chat_id=555)
    assert latency < 1.5
    assert texts(tg, 555) == ["Stopped.", "echo: hi again"]


async def test_streaming_preview_ends_as_exactly_one_final_message(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    answer = " ".join(f"w{i}" for i in range(60))
    fake_llm.push(text(answer, chunk_size=12, chunk_delay=0.03))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg, streaming=True)) as (gw, _):
        update = tg.send_text(555, "stream it")
        await settled(gw, fake_llm)
        await asyncio.sleep(0.3)  # a late preview edit or duplicate would land by now
    [final] = tg.messages_to(555)
    assert final["text"] == answer
    assert final["edits"] >= 2  # it was a live preview first
    assert final["reply_parameters"]["message_id"] == update["message"]["message_id"]
    assert tg.deleted == []


async def test_streamed_long_answer_keeps_the_preview_as_its_first_part(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    answer = long_answer()
    fake_llm.push(text(answer, chunk_size=2000, chunk_delay=0.05))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg, streaming=True)) as (gw, _):
        tg.send_text(555, "write a lot")
        await settled(gw, fake_llm)
        await asyncio.sleep(0.3)
    sent = tg.messages_to(555)
    plains = "".join(plain_text(m["text"], m["parse_mode"]) for m in sent)
    assert TOKENS.findall(plains) == TOKENS.findall(answer)  # no part twice, none missing
    assert sent[0]["edits"] >= 1 and all(m["edits"] == 0 for m in sent[1:])


async def test_stop_during_streaming_keeps_the_partial_preview_and_says_stopped(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(text(" ".join(f"w{i}" for i in range(200)), chunk_size=4, chunk_delay=0.05))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg, streaming=True)) as (gw, _):
        tg.send_text(555, "stream a lot")
        [preview] = await tg.wait_sent(1, chat_id=555)
        await eventually(lambda: preview["edits"] >= 2)
        tg.send_command(555, "/stop")
        await tg.wait_sent(2, chat_id=555)
        shown = preview["text"]
        await asyncio.sleep(0.3)  # no edit may land after the stop
    assert texts(tg, 555) == [shown, "Stopped."]
    assert shown.startswith("w0 w1") and not shown.endswith("w199")
    assert tg.deleted == []


async def test_an_interrupting_message_gets_one_answer_and_the_old_preview_goes(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(text(" ".join(f"w{i}" for i in range(200)), chunk_size=4, chunk_delay=0.05))
    async with running_gateway(tg_config(tmp_path, fake_llm, tg, streaming=True)) as (gw, _):
        tg.send_text(555, "stream a lot")
        [old] = await tg.wait_sent(1, chat_id=555)
        tg.send_text(555, "no wait, just say hi")
        await eventually(lambda: len(fake_llm.requests) == 2)
        await settled(gw, fake_llm)
    assert [(m["text"], m["deleted"]) for m in tg.messages_to(555)] == [
        (old["text"], True),
        ("echo: no wait, just say hi", False),
    ]
