"""Each local-API request gets its own outcome when a newer message in its session overtakes
it, even when its run was wedged and abandoned rather than interrupted; an interrupted one
names its run and the tokens it used."""

from __future__ import annotations

import asyncio
import json
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


async def test_a_wedged_overtaken_request_is_told_it_was_interrupted(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(hang(3))  # the first run never answers: abandoned after stop_grace_s
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        first = asyncio.create_task(client.chat("do something slow"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        second = await client.chat("never mind")
        first_result = await first
        # the wedged call ends before the next test: it would count in the fake's in-flight
        await eventually(lambda: gw.pool.abandoned == 0 and fake_llm.in_flight == 0, timeout=10)
    assert second["text"] == "echo: never mind"
    assert first_result["status"] == 200 and first_result["kind"] == "interrupted"
    assert first_result["text"] == ""


async def test_an_overtaken_request_names_its_run_and_the_tokens_it_used(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("slow " * 400, chunk_size=5, chunk_delay=0.05), text("quick"))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (_gw, client):
        first = asyncio.create_task(client.chat("do something slow"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        await asyncio.sleep(0.3)  # the model is writing when it is overtaken
        second = await client.chat("never mind")
        cut = (await first)["body"]
    assert cut["hermes"]["kind"] == "interrupted"
    assert cut["hermes"]["run_id"] not in ("", second["body"]["hermes"]["run_id"])
    # the provider never reported the cut call's usage: what it read and wrote is estimated
    assert cut["usage"]["prompt_tokens"] > 0 and cut["usage"]["completion_tokens"] > 0
    assert cut["usage"]["total_tokens"] == (
        cut["usage"]["prompt_tokens"] + cut["usage"]["completion_tokens"]
    )


async def test_an_overtaken_stream_names_its_run_and_the_tokens_it_used(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(tool_calls(("read_file", {"path": "a.txt"})), hang(3), text("quick"))
    body = {
        "user": "alice",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "read a.txt"}],
    }
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):

        async def first() -> list[dict[str, Any]]:
            url = f"{client.base}/v1/chat/completions"
            async with client.http.post(url, json=body) as resp:
                lines = [raw.decode().strip() async for raw in resp.content]
            return [json.loads(x[6:]) for x in lines if x.startswith("data: {")]

        task = asyncio.create_task(first())
        await eventually(lambda: len(fake_llm.requests) == 2)  # after the tool, waiting
        await client.chat("never mind")
        chunks = await task
        await eventually(lambda: gw.pool.abandoned == 0 and fake_llm.in_flight == 0, timeout=10)
    final = next(c for c in chunks if (c.get("hermes") or {}).get("kind"))
    assert final["hermes"]["kind"] == "interrupted" and final["hermes"]["run_id"]
    # the first call's reported usage, and the cut second call's estimate, are both counted
    assert chunks[-1]["usage"]["total_tokens"] > chunks[-1]["usage"]["prompt_tokens"] > 0
