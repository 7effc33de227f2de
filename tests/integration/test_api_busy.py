"""The local API's own busy policy (`platforms.api.busy_policy`, `queue` by default: each
request gets its own answer) and the note on what a request naming its session had ignored."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import structlog

from tests.fakes.openai import FakeOpenAI, text
from tests.harness import eventually, make_config, running_gateway


async def test_overlapping_requests_for_one_user_each_get_their_own_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("slow first answer", delay=0.5))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        first = asyncio.create_task(client.chat("echo 1"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        second = asyncio.create_task(client.chat("echo 2"))
        results = await asyncio.gather(first, second)
        _status, status = await client.get("/status", operator=True)
    assert [(r["status"], r["kind"], r["text"]) for r in results] == [
        (200, "reply", "slow first answer"),
        (200, "reply", "echo: echo 2"),
    ]
    # one turn each, in order: nothing merged into the other
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["echo 1", "echo 2"]
    assert status["busy_policies"]["api"] == "queue"


async def test_the_api_can_follow_the_runners_policy(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(text("w " * 200, chunk_size=3, chunk_delay=0.05))
    config = make_config(tmp_path, fake_llm.base_url, platforms={"api": {"busy_policy": "runner"}})
    async with running_gateway(config) as (_gw, client):
        first = asyncio.create_task(client.chat("write a lot"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        second = await client.chat("just say hi")
        cut = await first
    assert cut["kind"] == "interrupted" and second["text"] == "echo: just say hi"


async def test_a_system_prompt_sent_with_user_is_said_to_be_ignored(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    body = {
        "user": "alice",
        "messages": [
            {"role": "system", "content": "You are a pirate."},
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": "hello"},
        ],
    }
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (_gw, client):
        with structlog.testing.capture_logs() as logs:
            async with client.http.post(f"{client.base}/v1/chat/completions", json=body) as r:
                plain = await r.json()
        async with client.http.post(
            f"{client.base}/v1/chat/completions", json={**body, "stream": True}
        ) as r:
            chunks = [json.loads(line[6:]) async for line in _data_lines(r.content)]
        alone = await client.chat("only the new message")
    assert plain["choices"][0]["message"]["content"] == "echo: hello"
    assert plain["hermes"]["ignored"] == ["system", "messages[0..2]"]
    assert "only the last message was used" in plain["hermes"]["note"]
    assert chunks[-1]["hermes"]["ignored"] == ["system", "messages[0..2]"]
    assert any(e["event"] == "api.messages_ignored" for e in logs)
    # a request with its new message alone has nothing ignored
    assert "ignored" not in alone["body"]["hermes"]
    # the gateway's own system prompt went to the model, not the client's
    assert "pirate" not in json.dumps(fake_llm.requests[0]["messages"])


async def _data_lines(content: object) -> object:
    async for raw in content:  # type: ignore[attr-defined]
        line = raw.decode().strip()
        if line.startswith("data: {"):
            yield line
