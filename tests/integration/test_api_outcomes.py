"""Each local-API request gets its own outcome when a newer message in its session overtakes
it, even when its run was wedged and abandoned rather than interrupted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fakes.openai import FakeOpenAI, hang
from tests.harness import eventually, make_config, running_gateway


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
