"""The busy policies across instances: the session runs on instance "a" and the new messages
are taken by instance "b", which passes them to "a"; each policy must then do exactly what it
does on one process (tests/integration/test_busy_policies.py), and "b" runs nothing."""

from __future__ import annotations

import random
from pathlib import Path

from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.telegram import FakeTelegram
from tests.harness import eventually
from tests.integration.test_cluster import cluster, fast_adapter, message, runs_of, tg
from tests.redis_server import needs_redis

pytestmark = [needs_redis]
__all__ = ["fast_adapter", "tg"]  # fixtures


async def test_queue_answers_each_message_in_order_on_the_owner(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat = random.randint(10_000, 99_999)
    key = message(chat, 1, "x").session_key
    fake_llm.push(text("first done", delay=2))
    async with cluster(tmp_path, fake_llm, tg, busy_policy="queue") as (a, b):
        ran_a, ran_b = runs_of(a), runs_of(b)
        await a.reception.submit(message(chat, 1, "one"), durable=True)
        await eventually(lambda: len(fake_llm.requests) == 1)
        await b.reception.submit(message(chat, 2, "two"), durable=True)
        await eventually(lambda: a.runner.pending_count(key) == 1, timeout=10)
        await b.reception.submit(message(chat, 3, "three"), durable=True)
        replies = await tg.wait_sent(3, chat_id=chat, timeout=15)
    assert [r["text"] for r in replies] == ["first done", "echo: two", "echo: three"]
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["one", "two", "three"]
    assert ran_a == ["one"] and ran_b == []  # the next turns follow on a's runner


async def test_latest_tells_the_superseded_sender_on_the_owner(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat = random.randint(10_000, 99_999)
    key = message(chat, 1, "x").session_key
    fake_llm.push(text("first done", delay=2))
    async with cluster(tmp_path, fake_llm, tg, busy_policy="latest") as (a, b):
        ran_a, ran_b = runs_of(a), runs_of(b)
        await a.reception.submit(message(chat, 1, "one"), durable=True)
        await eventually(lambda: len(fake_llm.requests) == 1)
        await b.reception.submit(message(chat, 2, "two"), durable=True)
        await eventually(lambda: a.runner.pending_count(key) == 1, timeout=10)
        await b.reception.submit(message(chat, 3, "three"), durable=True)
        replies = await tg.wait_sent(3, chat_id=chat, timeout=15)
    texts = [r["text"] for r in replies]
    # "two" is told at once that "three" superseded it, while "one" still runs
    assert "newer message" in texts[0]
    assert texts[1:] == ["first done", "echo: three"]
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["one", "three"]
    assert ran_a == ["one"] and ran_b == []  # the next turn follows on a's runner


async def test_collect_merges_what_another_instance_took_into_one_turn(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat = random.randint(10_000, 99_999)
    key = message(chat, 1, "x").session_key
    fake_llm.push(text("first done", delay=2))
    async with cluster(tmp_path, fake_llm, tg, busy_policy="collect") as (a, b):
        ran_a, ran_b = runs_of(a), runs_of(b)
        await a.reception.submit(message(chat, 1, "one"), durable=True)
        await eventually(lambda: len(fake_llm.requests) == 1)
        await b.reception.submit(message(chat, 2, "two"), durable=True)
        await eventually(lambda: a.runner.pending_count(key) == 1, timeout=10)
        await b.reception.submit(message(chat, 3, "three"), durable=True)
        replies = await tg.wait_sent(2, chat_id=chat, timeout=15)
        await eventually(lambda: not a.runner.busy(key), timeout=10)
        sent = [m["text"] for m in tg.messages_to(chat)]
    assert [r["text"] for r in replies] == ["first done", "echo: two\n\nthree"]
    assert sent == ["first done", "echo: two\n\nthree"]
    assert fake_llm.requests[1]["messages"][-1]["content"] == "two\n\nthree"
    assert len(fake_llm.requests) == 2
    assert ran_a == ["one"] and ran_b == []  # the next turn follows on a's runner


async def test_steer_taken_by_another_instance_reaches_the_owners_loop(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat = random.randint(10_000, 99_999)
    key = message(chat, 1, "x").session_key
    fake_llm.push(tool_calls(("read_file", {"path": "a.txt"}), delay=2), text("Done, in French."))
    async with cluster(tmp_path, fake_llm, tg, busy_policy="steer") as (a, b):
        a.config.workspace_path.mkdir(parents=True, exist_ok=True)
        (a.config.workspace_path / "a.txt").write_text("alpha\n")
        ran_a, ran_b = runs_of(a), runs_of(b)
        await a.reception.submit(message(chat, 1, "summarize a.txt"), durable=True)
        await eventually(lambda: len(fake_llm.requests) == 1)
        await b.reception.submit(message(chat, 2, "answer in French"), durable=True)
        replies = await tg.wait_sent(1, chat_id=chat, timeout=15)
        await eventually(lambda: not a.runner.busy(key), timeout=10)
        sent = [m["text"] for m in tg.messages_to(chat)]
    followup = fake_llm.requests[1]["messages"]
    assert [m["role"] for m in followup[-3:]] == ["assistant", "tool", "user"]
    assert followup[-1]["content"] == "answer in French"
    assert [r["text"] for r in replies] == sent == ["Done, in French."]
    assert len(fake_llm.requests) == 2
    assert ran_a == ["summarize a.txt"] and ran_b == []
