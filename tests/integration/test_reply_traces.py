"""Each part of a reply in several parts is a `reply.part` span under its `reply.send`, with
what its platform calls' retries cost (a rate limit's wait), and no text of the conversation."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.otlp import Receiver, attrs
from tests.fakes.telegram import ApiError, FakeTelegram
from tests.harness import eventually, make_config, running_gateway
from tests.integration.test_telegram import TOKEN
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture

pytest.importorskip("opentelemetry.sdk")
pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")

QUESTION = "three parts about the zebra please"


def answer() -> str:
    """Three paragraphs, each too long to share a message with another: three parts."""
    return "\n\n".join(
        f"part{n} " + " ".join(f"okapi{n}x{j}" for j in range(300)) for n in (1, 2, 3)
    )


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


async def test_each_part_is_a_span_with_its_retries(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, receiver: Receiver
) -> None:
    name, send = tg._methods["sendmessage"]
    limited = 1

    async def part_two_limited(params: dict[str, Any]) -> Any:
        nonlocal limited
        if params["text"].startswith("part2") and limited:
            limited -= 1
            raise ApiError(429, "Too Many Requests: retry after 1", retry_after=1)
        return await send(params)

    tg._methods["sendmessage"] = (name, part_two_limited)
    telegram = {"enabled": True, "token": TOKEN, "base_url": tg.api_url, "allow_all": True}
    telegram["base_file_url"] = tg.file_url
    traces = {"enabled": True, "endpoint": receiver.endpoint, "schedule_delay_s": 0.1}
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        platforms={"telegram": telegram},
        observability={"traces": traces},
    )
    fake_llm.push(text(answer()), text("a short okapi answer"))
    async with running_gateway(config) as (gw, _):
        tg.send_text(555, QUESTION)
        await tg.wait_sent(3, chat_id=555, timeout=15)
        await eventually(lambda: not gw.runner.busy("telegram:dm:555"))
        tg.send_text(555, "and in one part, zebra?")
        await tg.wait_sent(4, chat_id=555, timeout=15)
        await eventually(lambda: len(receiver.named().get("reply.send", [])) >= 2, timeout=15)
        await asyncio.sleep(0.3)
    spans = receiver.named()
    parts = sorted(spans["reply.part"], key=lambda s: attrs(s)["hermes.reply.part"])
    sends = [s for s in spans["reply.send"] if attrs(s)["hermes.reply.kind"] == "reply"]
    reply_send, short = sorted(sends, key=lambda s: s.start_time_unix_nano)
    assert [attrs(p)["hermes.reply.part"] for p in parts] == [0, 1, 2]
    for part in parts:
        assert part.parent_span_id == reply_send.span_id
        assert part.trace_id == reply_send.trace_id
        assert attrs(part)["hermes.reply.outcome"] in {"posted", "edited"}
        assert attrs(part)["hermes.reply.chars"] > 400
    assert [attrs(p)["hermes.reply.retries"] for p in parts] == [0, 1, 0]
    assert [attrs(p)["hermes.reply.rate_limited"] for p in parts] == [0, 1, 0]
    assert attrs(parts[1])["hermes.reply.waited_ms"] >= 900
    assert attrs(parts[0])["hermes.reply.waited_ms"] == 0
    # a reply in one part is no part span: its reply.send carries what the part's would
    assert len(parts) == 3 and all(p.trace_id != short.trace_id for p in spans["reply.part"])
    assert attrs(short)["hermes.reply.retries"] == 0
    assert attrs(short)["hermes.reply.outcome"] in {"posted", "edited"}
    with receiver.lock:
        everything = " ".join(str(attrs(s)) + s.name for _r, s in receiver.spans)
    for words in ("zebra", "okapi", "part1", TOKEN):
        assert words not in everything


async def test_a_failed_sends_span_names_the_errors_class_never_its_text(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, receiver: Receiver
) -> None:
    name, send = tg._methods["sendmessage"]

    async def blocked(params: dict[str, Any]) -> Any:
        if params["text"].startswith("doomed"):
            raise ApiError(403, "Forbidden: bot was blocked by the zebra keeper")
        return await send(params)

    tg._methods["sendmessage"] = (name, blocked)
    telegram = {"enabled": True, "token": TOKEN, "base_url": tg.api_url, "allow_all": True}
    telegram["base_file_url"] = tg.file_url
    traces = {"enabled": True, "endpoint": receiver.endpoint, "schedule_delay_s": 0.1}
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        platforms={"telegram": telegram},
        observability={"traces": traces},
    )
    fake_llm.push(text("doomed okapi answer"))

    def failed() -> list[Any]:
        return [s for s in receiver.named().get("reply.send", []) if s.status.code == 2]

    async with running_gateway(config) as _:
        tg.send_text(555, QUESTION)
        await eventually(failed, timeout=15)
    (span,) = failed()
    assert span.status.message.isidentifier() and span.status.message.endswith("Error")
    assert list(span.events) == []
    with receiver.lock:
        everything = " ".join(str(s.status) + str(list(s.events)) for _r, s in receiver.spans)
    assert "zebra" not in everything and "okapi" not in everything
