"""The LLM client against the fake server: body parsing, connection reuse, stream errors."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent_core.llm import (
    KEEPALIVE_S,
    SHARD_CONNECTIONS,
    LLMClient,
    LLMSettings,
    ModelError,
    sdk_client,
    shards,
)
from tests.fakes.openai import FakeOpenAI, raw, text, tool_calls


def client(fake: FakeOpenAI, stream: bool = True) -> LLMClient:
    return LLMClient(
        LLMSettings(base_url=fake.base_url, api_key="sk-fake", model="m", stream=stream)
    )


@pytest.mark.parametrize("stream", [True, False])
def test_one_connection_serves_every_call(fake_llm: FakeOpenAI, stream: bool) -> None:
    llm = client(fake_llm, stream)
    pool = llm._sdk()._client._transport._pool  # type: ignore[attr-defined]
    seen = set()
    for i in range(5):
        assert llm.complete([{"role": "user", "content": f"hi {i}"}]).content == f"echo: hi {i}"
        seen.update(id(c) for c in pool.connections)
    assert len(seen) == 1  # the stream was read to its end, so the connection went back


@pytest.mark.parametrize("stream", [True, False])
def test_tool_calls_and_usage_are_parsed(fake_llm: FakeOpenAI, stream: bool) -> None:
    fake_llm.push(tool_calls(("read_file", {"path": "a.txt"}), ("read_file", '{"path": "b"}')))
    out = client(fake_llm, stream).complete([{"role": "user", "content": "read"}])
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        ("read_file", '{"path": "a.txt"}'),
        ("read_file", '{"path": "b"}'),
    ]
    assert all(c.id for c in out.tool_calls)
    assert out.finish_reason == "tool_calls"
    assert out.usage["prompt_tokens"] > 0


def test_stream_deltas_and_interrupt(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(text("one two three four", chunk_size=4), text("a b c d e f g h", chunk_size=2))
    deltas: list[str] = []
    out = client(fake_llm).complete([{"role": "user", "content": "x"}], on_delta=deltas.append)
    assert "".join(deltas) == out.content == "one two three four"
    stopped = client(fake_llm).complete(
        [{"role": "user", "content": "x"}], should_stop=lambda: True
    )
    assert stopped.interrupted


def test_an_error_inside_the_stream_is_a_model_error(fake_llm: FakeOpenAI) -> None:
    body = 'data: {"error": {"message": "overloaded"}}\n\ndata: [DONE]\n\n'
    fake_llm.push(raw(body, content_type="text/event-stream"))
    llm = LLMClient(
        LLMSettings(base_url=fake_llm.base_url, api_key="sk-fake", model="m", max_retries=0)
    )
    with pytest.raises(ModelError, match="overloaded"):
        llm.complete([{"role": "user", "content": "x"}])


def test_many_calls_at_once_fill_small_pools_one_after_the_other(fake_llm: FakeOpenAI) -> None:
    """A client sized for 96 calls at once keeps pools of at most 2 connections (a pool costs
    the square of its size in CPU per burst): 43 calls at once fill the first 21 pools and
    half the 22nd, and the next 43 reuse those connections; one call at a time, from any
    thread, reuses the first pool's one connection."""
    assert SHARD_CONNECTIONS == 2
    assert shards(None) == (1, None) and shards(2) == (1, 2) and shards(3) == (2, 2)
    assert shards(96) == (48, 2) and shards(1000) == (500, 2)
    llm = LLMClient(
        LLMSettings(base_url=fake_llm.base_url, api_key="sk-fake", model="m", connections=96)
    )

    def pools() -> list[list[object]]:
        built = [c for c in llm._clients if c is not None]
        return [c._client._transport._pool.connections for c in built]  # type: ignore[attr-defined]

    try:
        for i in range(3):  # each from a thread of its own
            with ThreadPoolExecutor(1) as one:
                assert one.submit(llm.complete, [{"role": "user", "content": f"{i}"}]).result()
        assert [len(p) for p in pools()] == [1]
        fake_llm.delay = 0.3  # the calls of a round overlap
        threads = 43
        start = threading.Barrier(threads)

        def two_calls(i: int) -> list[str]:
            out = []
            for n in (1, 2):
                start.wait(10)
                out.append(llm.complete([{"role": "user", "content": f"{i}.{n}"}]).content)
            return out

        with ThreadPoolExecutor(threads) as executor:
            answers = list(executor.map(two_calls, range(threads)))
        assert answers == [[f"echo: {i}.1", f"echo: {i}.2"] for i in range(threads)]
        assert [len(p) for p in pools()] == [2] * 21 + [1]
    finally:
        llm.close()


def test_a_sized_client_keeps_its_connections_between_bursts() -> None:
    """A client sized for a pool keeps that many connections alive for a minute, not httpx's
    5 s: a burst's connections are still open for the next burst, which would otherwise
    open hundreds at once (one of them timed out in the crowd bench)."""
    client = sdk_client("http://127.0.0.1:9/v1", "sk-fake", 30.0, connections=32)
    try:
        pool = client._client._transport._pool  # type: ignore[attr-defined]
        assert KEEPALIVE_S >= 60
        assert pool._keepalive_expiry == KEEPALIVE_S
        assert pool._max_keepalive_connections == 32
    finally:
        client.close()


def test_a_call_takes_the_first_pool_with_room() -> None:
    """Pools fill in order; a pool that frees a place is the next one taken, before later
    pools with room; with every pool full the least busy one takes the call."""
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1", api_key="", model="m", connections=6)
    llm = LLMClient(settings)
    assert [llm._take_shard() for _ in range(6)] == [0, 0, 1, 1, 2, 2]
    llm._give_shard(1)
    llm._give_shard(2)
    assert llm._take_shard() == 1
    assert llm._take_shard() == 2
    llm._give_shard(0)
    assert llm._take_shard() == 0
    assert llm._take_shard() == 0  # all full: the least busy (the first of equals)
    assert llm._in_flight == [3, 2, 2]
