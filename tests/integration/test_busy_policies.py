"""What happens to a message for a busy session, per `runner.busy_policy`, and `/stop`."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from hermes_gateway.config import Config
from tests.fakes.openai import FakeOpenAI, hang, text, tool_calls
from tests.harness import eventually, running_gateway
from tests.harness import make_config as harness_config


def make_config(tmp_path: Path, llm_url: str | None, **sections: Any) -> Config:
    """The harness's config, with the local API on `runner.busy_policy` (its own default is
    `queue`): these tests drive the runner's policies through the API."""
    return harness_config(
        tmp_path, llm_url, platforms={"api": {"busy_policy": "runner"}}, **sections
    )


def slow_answer(words: int = 40, delay: float = 0.05) -> object:
    """A streamed answer that takes ``words * delay`` seconds: a run we can interrupt."""
    return text(" ".join(f"w{i}" for i in range(words)), chunk_size=3, chunk_delay=delay)


async def test_interrupt_merges_the_stopped_message_into_the_next_turn(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(slow_answer(words=200))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        first = asyncio.create_task(client.chat("write a long essay"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        started = time.monotonic()
        second = await client.chat("actually, just say hi")
        first_result = await first
        history = await client.history()
    assert time.monotonic() - started < 3  # the 10 s answer was cut short
    assert second["text"] == "echo: actually, just say hi"
    # the overtaken request is told so; the answer to the newer one is not its answer
    assert first_result["kind"] == "interrupted" and first_result["text"] == ""
    roles = [(m["role"], m["content"]) for m in history]
    assert roles[0] == ("user", "write a long essay")
    assert roles[1][0] == "assistant" and roles[1][1].endswith("[interrupted]")
    assert roles[2:] == [
        ("user", "actually, just say hi"),
        ("assistant", "echo: actually, just say hi"),
    ]
    # the model saw the interrupted turn before the new message
    assert [m["role"] for m in fake_llm.requests[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]


async def test_queue_answers_each_message_in_order(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"busy_policy": "queue"})
    fake_llm.push(text("first done", delay=0.5))
    async with running_gateway(config) as (gw, client):
        t1 = asyncio.create_task(client.chat("one"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        t2 = asyncio.create_task(client.chat("two"))
        await eventually(lambda: gw.runner.pending_count("api:dm:alice") == 1)
        t3 = asyncio.create_task(client.chat("three"))
        results = await asyncio.gather(t1, t2, t3)
    assert [r["text"] for r in results] == ["first done", "echo: two", "echo: three"]
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["one", "two", "three"]


async def test_queue_overflow_is_told_not_dropped_silently(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(
        tmp_path, fake_llm.base_url, runner={"busy_policy": "queue", "queue_max": 1}
    )
    fake_llm.push(text("first done", delay=0.5))
    async with running_gateway(config) as (gw, client):
        t1 = asyncio.create_task(client.chat("one"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        t2 = asyncio.create_task(client.chat("two"))
        await eventually(lambda: gw.runner.pending_count("api:dm:alice") == 1)
        overflow = await client.chat("three")
        results = await asyncio.gather(t1, t2)
        _, metrics = await client.get("/metrics")
    # an API client gets 429 (its SDK retries); a chat platform gets the notice's text
    assert overflow["status"] == 429
    assert "did not take this one" in overflow["body"]["error"]["message"]
    assert [r["text"] for r in results] == ["first done", "echo: two"]
    assert 'hermes_messages_dropped_total{platform="api",reason="queue_full"} 1.0' in metrics


async def test_latest_tells_the_superseded_sender(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"busy_policy": "latest"})
    fake_llm.push(text("first done", delay=0.5))
    async with running_gateway(config) as (gw, client):
        t1 = asyncio.create_task(client.chat("one"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        t2 = asyncio.create_task(client.chat("two"))
        await eventually(lambda: gw.runner.pending_count("api:dm:alice") == 1)
        t3 = asyncio.create_task(client.chat("three"))
        first, second, third = await asyncio.gather(t1, t2, t3)
    assert first["text"] == "first done"
    assert second["kind"] == "notice" and "newer message" in second["text"]
    assert third["text"] == "echo: three"
    assert len(fake_llm.requests) == 2


async def test_collect_merges_pending_into_one_turn(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"busy_policy": "collect"})
    fake_llm.push(text("first done", delay=0.5))
    async with running_gateway(config) as (gw, client):
        t1 = asyncio.create_task(client.chat("one"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        t2 = asyncio.create_task(client.chat("two"))
        await eventually(lambda: gw.runner.pending_count("api:dm:alice") == 1)
        t3 = asyncio.create_task(client.chat("three"))
        first, second, third = await asyncio.gather(t1, t2, t3)
    assert first["text"] == "first done"
    assert fake_llm.requests[1]["messages"][-1]["content"] == "two\n\nthree"
    assert second["text"] == third["text"] == "echo: two\n\nthree"
    assert len(fake_llm.requests) == 2


async def test_steer_reaches_the_running_loop(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"busy_policy": "steer"})
    config.workspace_path.mkdir(parents=True)
    (config.workspace_path / "a.txt").write_text("alpha\n")
    fake_llm.push(tool_calls(("read_file", {"path": "a.txt"}), delay=0.5), text("Done, in French."))
    async with running_gateway(config) as (gw, client):
        t1 = asyncio.create_task(client.chat("summarize a.txt"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        second = await client.chat("answer in French")
        first = await t1
    followup = fake_llm.requests[1]["messages"]
    assert [m["role"] for m in followup[-3:]] == ["assistant", "tool", "user"]
    assert followup[-1]["content"] == "answer in French"
    assert first["text"] == second["text"] == "Done, in French."
    assert len(fake_llm.requests) == 2


async def test_steer_too_late_for_the_loop_runs_as_the_next_turn(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"busy_policy": "steer"})
    fake_llm.push(text("first done", delay=0.5))
    async with running_gateway(config) as (gw, client):
        t1 = asyncio.create_task(client.chat("one"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        second = await client.chat("two")
        first = await t1
    assert first["text"] == "first done"
    assert second["text"] == "echo: two"


async def test_stop_frees_a_wedged_session_at_once(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(hang(30))  # the model never answers: the agent thread is stuck in a read
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        stuck = asyncio.create_task(client.chat("do something slow"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        started = time.monotonic()
        stop = await client.chat("/stop")
        stop_latency = time.monotonic() - started
        stuck_result = await stuck
        after = await client.chat("are you there?")
        after_latency = time.monotonic() - started
        history = await client.history()
        # the stop cut the hung request off: the thread came back, and the model saw the
        # connection close, long before the hang's 30 s
        await eventually(lambda: gw.pool.abandoned == 0 and fake_llm.in_flight == 0, timeout=10)
        late = await client.history()
    assert stop["text"] == "Stopped." and stop_latency < 1.0
    assert stuck_result["text"] == "Stopped."
    assert after["text"] == "echo: are you there?" and after_latency < 2.0
    assert [m["content"] for m in history] == [
        "do something slow",
        "[interrupted]",
        "are you there?",
        "echo: are you there?",
    ]
    assert late == history  # the late result was discarded, not appended


async def test_stop_when_idle_and_new_resets_history(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        idle = await client.chat("/stop")
        await client.chat("remember me")
        reset = await client.chat("/new")
        after = await client.chat("who am I?")
        history = await client.history()
        help_text = await client.chat("/help")
        status = await client.chat("/status")
        await client.chat("/new")
        fresh = await client.chat("/status")  # nothing cached for the session now
    assert idle["text"] == "Nothing is running."
    assert "History: 2 message(s)" in status["text"]
    assert "History: 0 message(s)" in fresh["text"]
    assert reset["text"] == "Started a new conversation."
    assert [m["content"] for m in fake_llm.requests[-1]["messages"][1:]] == ["who am I?"]
    assert [m["content"] for m in history] == ["who am I?", "echo: who am I?"]
    assert after["text"] == "echo: who am I?"
    assert "/stop" in help_text["text"] and help_text["kind"] == "notice"
    assert "Session: api:dm:alice" in status["text"]


async def test_queue_command_runs_a_separate_turn(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(text("first done", delay=0.5))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        t1 = asyncio.create_task(client.chat("one"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        queued = await client.chat("/queue two")
        first = await t1
        await eventually(lambda: len(fake_llm.requests) == 2)
        await eventually(lambda: not gw.runner.busy("api:dm:alice"))
        history = await client.history()
    assert first["text"] == "first done"  # /queue did not interrupt
    assert queued["text"] == "echo: two"
    assert [m["content"] for m in history] == ["one", "first done", "two", "echo: two"]


async def test_runs_of_different_sessions_overlap_up_to_the_pool(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"workers": 3})
    fake_llm.delay = 1.0  # long enough that three runs overlap on a loaded machine
    async with running_gateway(config) as (gw, client):
        results = await asyncio.gather(*(client.chat("hi", user=f"u{i}") for i in range(9)))
    assert all(r["text"] == "echo: hi" for r in results)
    assert fake_llm.max_in_flight == 3
    assert gw.pool.peak_busy == 3
