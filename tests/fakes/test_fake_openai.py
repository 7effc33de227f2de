"""Drives the real openai SDK (sync client) against `FakeOpenAI`, keeping the fake wire-faithful."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fakes.openai import FakeOpenAI, error, hang, raw, text, tool_calls
from tests.fakes.server import wait_until

ROOT = Path(__file__).resolve().parents[2]
USER_HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key="sk-fake") as server:
        yield server


@pytest.fixture
def client(fake: FakeOpenAI) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0, timeout=5)


def chat(client: openai.OpenAI, messages: list[dict[str, Any]] | None = None, **kw: Any) -> Any:
    return client.chat.completions.create(model="gpt-test", messages=messages or USER_HI, **kw)


def test_plain_text_is_shaped_like_openai(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.push(text("hello"))
    resp = chat(client)
    assert resp.object == "chat.completion"
    assert resp.model == "gpt-test"
    assert resp.id.startswith("chatcmpl-")
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == "hello"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens > 0
    assert fake.requests == [{"model": "gpt-test", "messages": USER_HI}]


def test_tool_call_then_tool_message_follow_up(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    fake.push(tool_calls(("read_file", {"path": "a.txt"})), text("done"))
    first = chat(client, tools=tools)
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls is not None
    call = msg.tool_calls[0]
    assert (call.id, call.type, call.function.name) == ("call_1", "function", "read_file")
    assert json.loads(call.function.arguments) == {"path": "a.txt"}

    history = [
        *USER_HI,
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "file body"},
    ]
    assert chat(client, history).choices[0].message.content == "done"
    sent = fake.requests
    assert sent[0]["tools"] == tools
    assert sent[1]["messages"][1]["tool_calls"][0]["id"] == "call_1"
    assert sent[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "file body",
    }


def test_tool_call_ids_and_verbatim_arguments(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.push(tool_calls(("a", {}), ("b", "{not json", "call_custom"), content="thinking"))
    fake.push(tool_calls(("c", {"x": 1})))
    first = chat(client).choices[0].message
    fake.reset()  # ids stay unique across the fake's lifetime, reset or not
    fake.push(tool_calls(("d", {})))
    second = chat(client).choices[0].message
    assert first.content == "thinking"
    assert [(c.id, c.function.arguments) for c in first.tool_calls] == [
        ("call_1", "{}"),
        ("call_custom", "{not json"),
    ]
    assert second.tool_calls[0].id == "call_2"


def test_streaming_text_reassembles(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    content = "The quick brown fox jumps over the lazy dog."
    fake.push(text(content, chunk_size=5))
    with chat(client, stream=True) as stream:
        chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert "".join(pieces) == content
    assert len(pieces) == 9  # ceil(44 / 5)
    assert all(c.object == "chat.completion.chunk" and c.model == "gpt-test" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks][-2:] == [None, "stop"]
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for


def test_streaming_tool_calls_reassemble(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    args = {"path": "some/long/path/to/a/file.txt", "lines": [1, 2, 3]}
    fake.push(tool_calls(("read_file", args), ("ls", {"dir": "."}, "call_ls")))
    with chat(client, stream=True) as stream:
        chunks = list(stream)
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(delta.index, {"ids": [], "names": [], "args": [], "n": 0})
            entry["n"] += 1
            if delta.id:
                entry["ids"].append(delta.id)
            if delta.function and delta.function.name:
                entry["names"].append(delta.function.name)
            if delta.function and delta.function.arguments:
                entry["args"].append(delta.function.arguments)
    assert sorted(calls) == [0, 1]
    assert (calls[0]["ids"], calls[0]["names"]) == (["call_1"], ["read_file"])
    assert (calls[1]["ids"], calls[1]["names"]) == (["call_ls"], ["ls"])
    assert json.loads("".join(calls[0]["args"])) == args
    assert len(calls[0]["args"]) > 2  # the arguments really were split
    assert json.loads("".join(calls[1]["args"])) == {"dir": "."}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_stream_helper_final_completion(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.push(tool_calls(("read_file", {"path": "a.txt"})))
    with client.chat.completions.stream(model="m", messages=USER_HI) as stream:
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "read_file",
        {"path": "a.txt"},
    )


def test_usage_chunk_with_include_usage(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    fake.push(text("abc", usage=usage))
    with chat(client, stream=True, stream_options={"include_usage": True}) as stream:
        chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_none=True) == usage
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_client_disconnect_mid_stream_is_counted(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.push(text("x" * 400, chunk_size=4, chunk_delay=0.01))
    stream = chat(client, stream=True)
    next(iter(stream))
    stream.close()
    wait_until(lambda: fake.cancelled == 1, timeout=3)
    assert chat(client).choices[0].message.content == "echo: hi"  # still serving


def test_bad_key_is_authentication_error(fake: FakeOpenAI) -> None:
    bad = openai.OpenAI(base_url=fake.base_url, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        chat(bad)
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert fake.requests == []  # rejected before being recorded


def test_429_then_success_with_one_retry(fake: FakeOpenAI) -> None:
    # openai 2.54 ignores `retry-after: 0` (it wants 0 < x <= 60) and backs off ~0.4-0.5 s, so a
    # small positive value is what makes retries fast; the timing proves the header got through.
    retrying = openai.OpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=1)
    fake.push(error(429, retry_after="0.01"), text("after retry"))
    started = time.monotonic()
    assert chat(retrying).choices[0].message.content == "after retry"
    assert time.monotonic() - started < 0.3
    assert len(fake.requests) == 2


def test_429_error_shape(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.push(error(429, message="slow down", retry_after=3))
    with pytest.raises(openai.RateLimitError) as info:
        chat(client)
    assert info.value.response.headers["retry-after"] == "3"
    assert info.value.body == {
        "message": "slow down",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }


def test_500_is_internal_server_error(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.push(error(500, message="boom"), error(503, body={"error": {"message": "custom"}}))
    with pytest.raises(openai.InternalServerError, match="boom") as info:
        chat(client)
    assert info.value.status_code == 500
    with pytest.raises(openai.InternalServerError, match="custom") as info:
        chat(client)
    assert info.value.status_code == 503


def test_raw_malformed_json_raises_json_decode_error(
    fake: FakeOpenAI, client: openai.OpenAI
) -> None:
    # openai 2.54 does not wrap this: a plain json.JSONDecodeError escapes, not an APIError.
    fake.push(raw("{not json"))
    with pytest.raises(json.JSONDecodeError):
        chat(client)
    # An unexpected shape is not validated either: it parses into a mostly empty object.
    fake.push(raw('{"choices": []}'))
    resp = chat(client)
    assert resp.choices == []
    assert resp.id is None


def test_hang_times_out_and_does_not_block_shutdown() -> None:
    fake = FakeOpenAI().start()
    fake.push(hang(5))
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        chat(client)
    assert 0.25 < time.monotonic() - started < 1.0
    started = time.monotonic()
    fake.stop()
    assert time.monotonic() - started < 1.0


def test_short_hang_then_close_is_connection_error(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.push(hang(0.1))
    with pytest.raises(openai.APIConnectionError) as info:
        chat(client)
    assert not isinstance(info.value, openai.APITimeoutError)


def test_delay_and_concurrency(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.delay = 0.2
    results: list[str] = []

    def one(i: int) -> None:
        results.append(
            chat(client, [{"role": "user", "content": str(i)}]).choices[0].message.content
        )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    elapsed = time.monotonic() - started
    assert sorted(results) == [f"echo: {i}" for i in range(4)]
    assert fake.max_in_flight == 4
    assert fake.in_flight == 0
    assert 0.2 <= elapsed < 0.6  # delayed, but served in parallel


def test_per_spec_delay_adds_to_fake_delay(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.delay = 0.05
    fake.push(text("slow", delay=0.1))
    started = time.monotonic()
    chat(client)
    assert time.monotonic() - started >= 0.15


def test_default_echo_and_responder(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    assert chat(client).choices[0].message.content == "echo: hi"
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    history = [{"role": "user", "content": "old"}, {"role": "user", "content": parts}]
    assert chat(client, history).choices[0].message.content == "echo: ab"

    fake.responder = lambda body: text(f"n={len(body['messages'])}")
    fake.push(text("scripted first"))
    assert chat(client).choices[0].message.content == "scripted first"
    assert chat(client, history).choices[0].message.content == "n=2"
    fake.responder = lambda body: body["missing"]
    with pytest.raises(openai.InternalServerError, match="KeyError"):
        chat(client)
    fake.reset()
    assert (fake.requests, fake.max_in_flight, fake.pending) == ([], 0, 0)


def test_models_list() -> None:
    with FakeOpenAI(models=["gpt-a", "gpt-b"]) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0)
        assert [m.id for m in client.models.list()] == ["gpt-a", "gpt-b"]


def test_cli_prints_ready_and_serves() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "tests.fakes.openai", "--api-key", "sk-cli", "--delay", "0"]
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert re.fullmatch(r"READY http://127\.0\.0\.1:\d+/v1", line), line
            client = openai.OpenAI(base_url=line.split()[1], api_key="sk-cli", max_retries=0)
            assert [m.id for m in client.models.list()] == ["gpt-4o-mini"]
            proc.terminate()
            assert proc.wait(5) == 0
            assert proc.stdout.read() == ""  # exactly one line
        finally:
            if proc.poll() is None:
                proc.kill()


def test_keep_bounds_the_bodies_held_but_not_the_count() -> None:
    with FakeOpenAI(api_key="sk-fake", keep=1) as bounded:
        client = openai.OpenAI(base_url=bounded.base_url, api_key="sk-fake", max_retries=0)
        for n in range(3):
            chat(client, [{"role": "user", "content": f"message {n}"}])
        assert bounded.stats()["requests"] == 3
        [last] = bounded.requests
        assert last["messages"] == [{"role": "user", "content": "message 2"}]
