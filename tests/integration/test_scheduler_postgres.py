"""Two `hermes gateway run` processes on one PostgreSQL database, both ticking: every slot of a
job runs exactly once (one model call per slot, no run lost or doubled)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, Response, text
from tests.fakes.server import wait_until
from tests.integration.test_postgres import SERVER
from tests.scheduler.test_ledger import postgres_database

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)"),
]
PROMPT = "Count the new orders."


@pytest.fixture
async def pg() -> AsyncIterator[str]:
    async with postgres_database() as url:
        yield url


def gateway(home: Path, llm: FakeOpenAI, url: str) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "store": {"url": url},
        "scheduler": {"enabled": True, "timezone": "UTC", "tick_s": 0.1, "min_interval_s": 1},
    }
    return GatewayProcess(home, config)


async def test_two_gateways_on_one_database_run_each_slot_once(
    tmp_path: Path, fake_llm: FakeOpenAI, pg: str
) -> None:
    def model(body: dict[str, Any]) -> Response:
        return text("3 new orders")

    fake_llm.responder = model
    first, second = gateway(tmp_path / "a", fake_llm, pg), gateway(tmp_path / "b", fake_llm, pg)
    try:
        first.start()
        second.start()
        job = {"schedule": "every 1s", "prompt": PROMPT, "repeat": 8}
        made = httpx.post(
            f"{first.url}/v1/cron/jobs", json=job, headers=first.operator, timeout=10
        ).json()["job"]

        def finished() -> list[dict[str, Any]]:
            url = f"{second.url}/v1/cron/jobs/{made['id']}/runs"
            got = httpx.get(url, headers=second.operator, timeout=10)
            runs: list[dict[str, Any]] = got.json()["runs"]
            return runs if len(runs) == 8 and all(r["finished_at"] for r in runs) else []

        runs = await_sync(finished)
    finally:
        first.kill()
        second.kill()
    assert Counter(r["scheduled_for"] for r in runs).most_common(1)[0][1] == 1
    assert all(r["status"] == "succeeded" for r in runs), runs
    job_turns = [r for r in fake_llm.requests if PROMPT in json.dumps(r["messages"][-1])]
    assert len(job_turns) == 8  # no slot's turn ran twice
    claims = [  # one line per batch of claims
        (run_id, gw.home.name)
        for gw in (first, second)
        for e in gw.log_events()
        if e["event"] == "job.claimed"
        for run_id in e["run_ids"]
    ]
    assert len(claims) == len({run_id for run_id, _ in claims}) == 8  # each by one process


def await_sync(probe: Any) -> Any:
    return wait_until(probe, timeout=60, interval=0.2)
