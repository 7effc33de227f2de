"""A crowd against `hermes gateway run` with its default pool (`runner.workers: auto`): 100
conversations at once on a model that takes a second are all answered, and they all waited on
the model together instead of eight at a time."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI

pytestmark = pytest.mark.e2e
SESSIONS = 100


async def test_a_hundred_conversations_wait_on_the_model_at_once(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    fake_llm.delay = 1.0
    gateway.start()
    limits = httpx.Limits(max_connections=SESSIONS)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60, limits=limits) as http:

        async def ask(i: int) -> str:
            body = {"user": f"crowd-{i}", "messages": [{"role": "user", "content": f"hi {i}"}]}
            resp = await http.post("/v1/chat/completions", json=body)
            assert resp.status_code == 200, resp.text
            return str(resp.json()["choices"][0]["message"]["content"])

        answers = await asyncio.gather(*(ask(i) for i in range(SESSIONS)))
    assert answers == [f"echo: hi {i}" for i in range(SESSIONS)]
    # every conversation's model call was in flight at once (the old default pool: 8)
    assert fake_llm.max_in_flight == SESSIONS
