"""The spine through the local chat API: replies, history, tools, errors, bad input, auth."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from hermes_gateway.errors import TransientAdapterError
from hermes_gateway.events import OutboundMessage
from tests.fakes.openai import FakeOpenAI, Response, error, raw, text, tool_calls
from tests.harness import eventually, make_config, running_gateway


async def test_reply_and_history(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(text("Hi Alice!"), text("You said hello before."))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        first = await client.chat("hello")
        second = await client.chat("what did I say?")
        history = await client.history()
    assert first["text"] == "Hi Alice!"
    assert second["text"] == "You said hello before."
    # the second request carried the first turn: the gateway keeps the history
    sent = fake_llm.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1]["content"] == "hello" and sent[2]["content"] == "Hi Alice!"
    assert [m["content"] for m in history] == [
        "hello",
        "Hi Alice!",
        "what did I say?",
        "You said hello before.",
    ]


async def test_streaming_reply_arrives_in_pieces(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    # spaced as a model streams: deltas that reach the loop together go out as one piece
    fake_llm.push(text("one two three four five six", chunk_size=4, chunk_delay=0.05))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        result = await client.chat("count", stream=True)
    assert result["text"] == "one two three four five six"
    assert len(result["deltas"]) > 3
    assert result["kind"] == "reply"


async def test_a_tool_shows_in_the_stream_before_the_words_after_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # the loop is held up from the first model call until the second has been answered: the
    # tool's notes and the words after it are all waiting when it runs again, and must come
    # out in the order they happened (a busy machine holds a loop up like this)
    replies = [tool_calls(("read_file", {"path": "notes.txt"})), text("No notes yet.")]
    answered = threading.Event()

    def hold_the_loop() -> None:
        answered.wait(10)
        time.sleep(0.5)  # the streamed words reach the agent's thread meanwhile

    def respond(body: dict[str, Any]) -> Response:
        if len(replies) == 2:
            loop.call_soon_threadsafe(hold_the_loop)
        else:
            answered.set()
        return replies.pop(0)

    fake_llm.responder = respond
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        loop = asyncio.get_running_loop()
        result = await client.chat("read my notes", stream=True)
    notes, words = result["shown"][:2], result["shown"][2:]
    assert notes == ["[tool start: read_file]", "[tool end: read_file]"]
    assert "".join(words) == "No notes yet."


async def test_system_prompt_is_stable_across_turns(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        await client.chat("one")
        await client.chat("two")
    first, second = (r["messages"][0] for r in fake_llm.requests)
    assert first["role"] == "system" and first == second


async def test_sessions_are_isolated(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        await client.chat("alice secret", user="alice")
        await client.chat("bob here", user="bob")
        bob = await client.history("bob")
    assert "alice secret" not in str(fake_llm.requests[1]["messages"])
    assert [m["content"] for m in bob] == ["bob here", "echo: bob here"]


async def test_tool_call_pairs_stay_valid(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url)
    config.workspace_path.mkdir(parents=True)
    (config.workspace_path / "notes.txt").write_text("buy milk\n")
    fake_llm.push(tool_calls(("read_file", {"path": " notes.txt "}), ("read_file", '{"path": 7')))
    fake_llm.push(text("Your note says: buy milk."))
    async with running_gateway(config) as (gw, client):
        result = await client.chat("what is in my notes?")
        history = await client.history()
    assert result["text"] == "Your note says: buy milk."
    followup = fake_llm.requests[1]["messages"]
    assistant = followup[-3]
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["read_file", "read_file"]
    results = followup[-2:]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in assistant["tool_calls"]]
    assert "1| buy milk" in results[0]["content"]
    assert results[1]["content"].startswith("Error: arguments for read_file are not valid JSON")
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "assistant"]


async def test_workspace_escape_is_an_error_observation(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(tool_calls(("read_file", {"path": "../../etc/passwd"})), text("Not allowed."))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        result = await client.chat("read /etc/passwd")
    observation = fake_llm.requests[1]["messages"][-1]["content"]
    assert "outside the workspace" in observation
    assert "root:" not in observation
    assert result["text"] == "Not allowed."


async def test_model_errors_are_retried_then_explained(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, model={"max_retries": 2})
    fake_llm.push(error(500, retry_after="0.01"), error(503, retry_after="0.01"), text("Back!"))
    fake_llm.push(*(error(500, retry_after="0.01") for _ in range(3)))
    async with running_gateway(config) as (gw, client):
        recovered = await client.chat("first")
        failed = await client.chat("second")
        after = await client.chat("third")
    assert recovered["text"] == "Back!"
    # an API client gets an error status its SDK raises on; a chat platform gets the text
    assert failed["status"] == 502
    assert failed["body"]["error"]["message"] == (
        "The model is unavailable (HTTP 500); try again shortly."
    )
    assert after["text"] == "echo: third"  # the session still works
    assert len(fake_llm.requests) == 7


async def test_unreadable_model_response_is_explained(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, model={"stream": False})
    fake_llm.push(raw("{not json"), raw('{"choices": []}'))
    async with running_gateway(config) as (gw, client):
        garbled = await client.chat("one")
        empty = await client.chat("two")
        fine = await client.chat("three")
    assert garbled["status"] == empty["status"] == 502
    assert garbled["body"]["error"]["message"] == "The model sent a response I could not read."
    assert empty["body"]["error"]["message"] == "The model sent an empty response."
    assert fine["text"] == "echo: three"


async def test_no_model_configured_says_what_to_set(tmp_path: Path) -> None:
    async with running_gateway(make_config(tmp_path, None)) as (gw, client):
        result = await client.chat("hello?")
        status, ready = await client.get("/readyz")
    said = result["body"]["error"]["message"]
    assert result["status"] == 503 and result["body"]["error"]["code"] == "model_not_configured"
    assert "model.api_key" in said and "OPENAI_API_KEY" in said
    # it answers (with what to set), but it is not ready to serve anyone a real answer
    assert status == 503 and ready["ready"] is False
    assert any(r.startswith("model: not configured") for r in ready["reasons"])


async def test_bad_requests_get_openai_style_errors(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"max_input_chars": 50})
    async with running_gateway(config) as (gw, client):
        url = f"{client.base}/v1/chat/completions"
        cases = {
            "{not json": 400,
            '{"messages": []}': 400,
            '{"messages": [{"role": "user", "content": "   "}]}': 400,
            '{"messages": [{"role": "assistant", "content": "x"}]}': 400,
            '{"user": "a b", "messages": [{"role": "user", "content": "x"}]}': 400,
            '{"messages": [{"role": "user", "content": "' + "x" * 51 + '"}]}': 413,
        }
        for body, expected in cases.items():
            async with client.http.post(url, data=body) as resp:
                data = await resp.json()
                assert resp.status == expected, body
                assert data["error"]["message"], body
        ok = await client.chat("still fine")
        history = await client.history()
    assert ok["text"] == "echo: still fine"
    assert [m["content"] for m in history] == ["still fine", "echo: still fine"]
    assert len(fake_llm.requests) == 1


async def test_duplicate_message_id_is_not_processed_twice(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        first = await client.chat("once", key="msg-1")
        again = await client.chat("once", key="msg-1")
    assert first["text"] == "echo: once"
    assert again["status"] == 409
    assert len(fake_llm.requests) == 1


async def test_control_token_is_required(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, control={"token": "s3cret-token"})
    async with running_gateway(config) as (gw, client):
        status, body = await client.get("/status")
        health, _ = await client.get("/healthz")
        async with aiohttp.ClientSession(
            headers={"Authorization": "Bearer s3cret-token"}
        ) as authed:
            async with authed.get(f"{client.base}/status") as resp:
                ok_status = resp.status
    assert status == 401 and body["error"]["code"] == "unauthorized"
    assert health == 200
    assert ok_status == 200


async def test_metrics_and_status(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, runner={"workers": 8})
    async with running_gateway(config) as (gw, client):
        await client.chat("count me")
        status, metrics = await client.get("/metrics")
        _, info = await client.get("/status", operator=True)
    assert status == 200
    assert 'hermes_messages_received_total{platform="api"} 1.0' in metrics
    assert 'hermes_messages_answered_total{outcome="done",platform="api"} 1.0' in metrics
    assert "hermes_loop_lag_seconds_bucket" in metrics
    assert "hermes_pool_busy" in metrics
    assert info["pool"]["workers"] == 8 and info["platforms"]["api"]["ready"] is True


async def test_agent_log_lines_carry_the_run_context(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url)
    config.workspace_path.mkdir(parents=True)
    (config.workspace_path / "a.txt").write_text("x\n")
    fake_llm.push(tool_calls(("read_file", {"path": "a.txt"})), text("done"))
    capture = structlog.testing.LogCapture()
    old = structlog.get_config()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        async with running_gateway(config) as (gw, client):
            await client.chat("read it")
    finally:
        structlog.configure(**old)
    tool_lines = [e for e in capture.entries if e["event"] == "tool.call"]
    assert len(tool_lines) == 1  # logged on the worker thread ...
    line = tool_lines[0]  # ... yet it carries the loop side's bound context
    assert line["session_key"] == "api:dm:alice"
    assert line["platform"] == "api"
    finished = next(e for e in capture.entries if e["event"] == "run.finished")
    assert line["run_id"] == finished["run_id"] and len(line["run_id"]) == 12


async def test_a_reply_that_could_not_be_sent_is_resent_at_start_without_a_model_call(
    tmp_path: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = make_config(tmp_path, fake_llm.base_url)
    fake_llm.push(text("the answer"))
    async with running_gateway(config) as (gw, client):
        api = gw.adapters["api"]
        real_send = api.send

        async def broken(message: OutboundMessage) -> None:
            raise TransientAdapterError("network down")

        monkeypatch.setattr(api, "send", broken)
        task = asyncio.create_task(client.chat("question"))
        await eventually(lambda: gw.metrics.delivery_failures.labels("api")._value.get() == 1)
        task.cancel()
        monkeypatch.setattr(api, "send", real_send)
    async with running_gateway(config) as (gw, client):
        sent: list[OutboundMessage] = []
        monkeypatch.setattr(gw.adapters["api"], "send", _recorder(sent))
        await eventually(lambda: sent)
        history = await client.history()
    assert [m.text for m in sent] == ["the answer"]
    assert len(fake_llm.requests) == 1  # re-sent from the store, not asked again
    assert [m["content"] for m in history] == ["question", "the answer"]


def _recorder(sent: list[OutboundMessage]) -> object:
    async def send(message: OutboundMessage) -> None:
        sent.append(message)

    return send


async def test_the_startup_heap_is_frozen_out_of_the_collector(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    gc.unfreeze()
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        # once ready, a full collection no longer scans the startup heap
        await eventually(lambda: gc.get_freeze_count() > 0)
        frozen_at_ready = gc.get_freeze_count()
        assert all(c is None for c in gw.llm._clients)  # idle: the SDK waits for a message
        assert (await client.chat("still answers"))["text"] == "echo: still answers"
        # the first message built the client, and what it loaded was frozen out too
        await eventually(lambda: any(c is not None for c in gw.llm._clients))
        await eventually(lambda: gc.get_freeze_count() > frozen_at_ready)
