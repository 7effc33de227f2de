"""Scheduled jobs through `hermes gateway run` on the fake Telegram and the fake model: the
model creates a job with the `cronjob` tool, it fires and its answer arrives in the chat; a
job answering `[SILENT]` delivers nothing; `/cron` and `GET /v1/cron/jobs` list them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess, telegram_config
from tests.fakes.openai import FakeOpenAI, Response, text, tool_calls
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"
STRETCH = "Tell the user it is time to stretch."
QUIET = "Check the feeds; answer [SILENT] unless something is new."


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def scheduling_gateway(home: Path, llm: FakeOpenAI, fake: FakeTelegram) -> GatewayProcess:
    config = telegram_config(
        llm,
        fake,
        TOKEN,
        [555],
        tools={"enabled": ["cronjob"]},
        # seconds-long intervals and a fast tick, so nothing here waits for minutes
        scheduler={"enabled": True, "timezone": "UTC", "tick_s": 0.2, "min_interval_s": 1},
    )
    return GatewayProcess(home, config)


def model(body: dict[str, Any]) -> Response:
    """The chat's turn creates the job the user asks for; a job's turn answers its prompt."""
    last = body["messages"][-1]
    said = str(last.get("content") or "")
    if last["role"] == "tool":
        return text(f"Done. {said}")
    if STRETCH in said:
        return text("Time to stretch!")
    if QUIET in said:
        return text("[SILENT]")
    if "stretch" in said:
        create = {"action": "create", "prompt": STRETCH, "schedule": "in 1s", "name": "stretch"}
        return tool_calls(("cronjob", create))
    if "feeds" in said:
        create = {"action": "create", "prompt": QUIET, "schedule": "every 1s", "repeat": 2}
        return tool_calls(("cronjob", json.dumps(create)))
    return text(f"echo: {said}")


def texts(tg: FakeTelegram) -> list[str]:
    return [str(m["text"]) for m in tg.messages_to(555)]


def test_a_job_the_model_creates_fires_and_answers_in_the_chat(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.responder = model
    gateway = scheduling_gateway(tmp_path / "home", fake_llm, tg)
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200)
        op = gateway.operator
        tg.send_text(555, "remind me in a second to stretch")
        wait_until(lambda: "Time to stretch!" in texts(tg), timeout=20)
        first = texts(tg)[0]
        assert first.startswith("Done. Created job") and "first run" in first
        [job] = httpx.get(f"{gateway.url}/v1/cron/jobs", headers=op, timeout=5).json()["jobs"]
        assert (job["name"], job["kind"], job["state"], job["runs"]) == (
            "stretch",
            "once",
            "done",
            1,
        )
        url = f"{gateway.url}/v1/cron/jobs/{job['id']}/runs"
        [run] = httpx.get(url, headers=op, timeout=5).json()["runs"]
        assert (run["status"], run["delivery"], run["output"]) == (
            "succeeded",
            "delivered",
            "Time to stretch!",
        )
        # the job ran in a session of its own: the chat's history has only the chat's turn
        [job_turn] = [
            r for r in fake_llm.requests if str(r["messages"][-1]["content"]).startswith("[Sched")
        ]
        assert STRETCH in job_turn["messages"][-1]["content"]
        assert "remind me" not in json.dumps(job_turn["messages"])

        tg.send_text(555, "/cron")
        wait_until(lambda: any(job["id"] in t and "stretch" in t for t in texts(tg)[2:]))
        status = httpx.get(f"{gateway.url}/status", headers=op, timeout=5).json()["scheduler"]
        assert status["enabled"] and status["outcomes"]["succeeded"] == 1
    finally:
        gateway.kill()


def test_a_silent_answer_delivers_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.responder = model
    gateway = scheduling_gateway(tmp_path / "home", fake_llm, tg)
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200)
        op = gateway.operator
        tg.send_text(555, "check my feeds every second, twice")
        wait_until(lambda: texts(tg), timeout=15)
        [job] = httpx.get(f"{gateway.url}/v1/cron/jobs", headers=op, timeout=5).json()["jobs"]

        def runs() -> list[dict[str, Any]]:
            url = f"{gateway.url}/v1/cron/jobs/{job['id']}/runs"
            got: list[dict[str, Any]] = httpx.get(url, headers=op, timeout=5).json()["runs"]
            return got if len(got) == 2 and all(r["finished_at"] for r in got) else []

        done = wait_until(runs, timeout=20)
        assert [(r["status"], r["delivery"], r["output"]) for r in done] == [
            ("succeeded", "skipped", "[SILENT]")
        ] * 2
        # the job's own session: its second run sees its first run's answer, not the chat
        first, second = [
            r["messages"]
            for r in fake_llm.requests
            if str(r["messages"][-1]["content"])[:6] == "[Sched"
        ]
        assert {"role": "assistant", "content": "[SILENT]"} in second
        assert not any("feeds every second" in str(m.get("content")) for m in first + second)
        metrics = httpx.get(f"{gateway.url}/metrics", timeout=5).text
        assert 'hermes_cron_runs_total{outcome="succeeded"} 2.0' in metrics
        [only] = texts(tg)  # the chat's answer, and no job's
        assert only.startswith("Done. Created job")
    finally:
        gateway.kill()


def test_a_busy_chat_neither_delays_a_jobs_answer_nor_is_interrupted_by_it(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    def slow_chat(body: dict[str, Any]) -> Response:
        said = str(body["messages"][-1].get("content") or "")
        return text("Time to stretch!") if STRETCH in said else text("slow answer", delay=8)

    fake_llm.responder = slow_chat
    gateway = scheduling_gateway(tmp_path / "home", fake_llm, tg)
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200)
        tg.send_text(555, "take your time")
        wait_until(lambda: fake_llm.in_flight, timeout=10)  # the chat's turn is running
        job = {"schedule": "in 1s", "prompt": STRETCH, "deliver": "telegram:555"}
        created = httpx.post(
            f"{gateway.url}/v1/cron/jobs", json=job, headers=gateway.operator, timeout=5
        )
        assert created.status_code == 200, created.text
        wait_until(lambda: "Time to stretch!" in texts(tg), timeout=15)
        assert "slow answer" not in texts(tg)  # delivered while the chat's turn still runs
        wait_until(lambda: "slow answer" in texts(tg), timeout=20)
        assert texts(tg) == ["Time to stretch!", "slow answer"]  # not interrupted
    finally:
        gateway.kill()
