"""Scheduled jobs across SIGKILLs of `hermes gateway run` (fake Telegram, fake model): killed
during a job's run, between its run and its delivery, and while idle across a due slot. After
each restart no run is left `running`, each slot ran at most once (a killed run is
`abandoned`, never rerun), and every successful run's answer arrived exactly once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess, telegram_config
from tests.fakes.openai import FakeOpenAI, Response, text
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"
PROMPT = "Report the backup status."


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def daemon(home: Path, llm: FakeOpenAI, fake: FakeTelegram) -> GatewayProcess:
    config = telegram_config(
        llm,
        fake,
        TOKEN,
        [555],
        scheduler={
            "enabled": True,
            "timezone": "UTC",
            "tick_s": 0.2,
            "min_interval_s": 1,
            "lease_s": 2,  # a dead owner's run is reaped 2 s after its last heartbeat
        },
    )
    return GatewayProcess(home, config)


def api(gw: GatewayProcess, method: str, path: str, **kw: Any) -> Any:
    url = f"{gw.url}/v1/cron/jobs{path}"
    response = httpx.request(method, url, headers=gw.operator, timeout=10, **kw)
    assert response.status_code == 200, response.text
    return response.json()


def answers(tg: FakeTelegram) -> Counter[str]:
    return Counter(str(m["text"]) for m in tg.messages_to(555))


def settled(gw: GatewayProcess, job_id: str, runs: int) -> list[dict[str, Any]]:
    """The job's runs once ``runs`` exist and none is live or still being delivered."""
    got: list[dict[str, Any]] = api(gw, "GET", f"/{job_id}/runs")["runs"]
    busy = [r for r in got if r["status"] in ("claimed", "running") or r["delivery"] == "pending"]
    return got if len(got) >= runs and not busy else []


def check(gw: GatewayProcess, tg: FakeTelegram, runs: list[dict[str, Any]]) -> None:
    slots = Counter(r["scheduled_for"] for r in runs)
    assert set(slots.values()) == {1}  # each slot at most once
    succeeded = [r for r in runs if r["status"] == "succeeded"]
    assert all(r["delivery"] == "delivered" for r in succeeded)
    got = answers(tg)
    for r in succeeded:
        assert got[r["output"]] == 1, (r, got)  # each answer arrived exactly once


def restart(gw: GatewayProcess) -> None:
    gw.kill()
    gw.start()


@pytest.mark.slow  # waits out a run's lease after the kill
def test_killed_during_a_run_the_run_is_abandoned_and_the_next_slots_run(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    turns: list[int] = []

    def model(body: dict[str, Any]) -> Response:
        turns.append(1)
        # the first run hangs until the kill; the others answer, each differently
        return text("never", delay=60) if len(turns) == 1 else text(f"backup ok #{len(turns)}")

    fake_llm.responder = model
    gw = daemon(tmp_path / "home", fake_llm, telegram).start()
    try:
        job = {"schedule": "every 3s", "prompt": PROMPT, "deliver": "telegram:555", "repeat": 3}
        job_id = api(gw, "POST", "", json=job)["job"]["id"]
        wait_until(lambda: turns, timeout=15)  # the first run is in its model call
        restart(gw)  # SIGKILL, then start again
        runs = wait_until(lambda: settled(gw, job_id, 3), timeout=40)
    finally:
        gw.kill()
    assert sorted(r["status"] for r in runs) == ["abandoned", "succeeded", "succeeded"]
    check(gw, telegram, runs)
    assert "never" not in answers(telegram)


def test_killed_between_a_run_and_its_delivery_the_answer_arrives_once(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.responder = lambda body: text("backup ok")
    gw = daemon(tmp_path / "home", fake_llm, telegram).start()
    try:
        telegram.fail_next("sendMessage", status=500, times=1000)  # Telegram is down
        job = {"schedule": "in 1s", "prompt": PROMPT, "deliver": "telegram:555"}
        job_id = api(gw, "POST", "", json=job)["job"]["id"]

        def answered_not_delivered() -> bool:
            runs = api(gw, "GET", f"/{job_id}/runs")["runs"]
            return bool(runs) and (runs[0]["status"], runs[0]["delivery"]) == (
                "succeeded",
                "pending",
            )

        wait_until(answered_not_delivered, timeout=20)
        gw.kill()
        telegram._on_loop(telegram._failures.clear)  # Telegram is back
        gw.start()
        runs = wait_until(lambda: settled(gw, job_id, 1), timeout=30)
    finally:
        gw.kill()
    check(gw, telegram, runs)
    assert answers(telegram)["backup ok"] == 1


@pytest.mark.slow  # the ledger's tests cover a late slot; this one adds the real restart
def test_killed_while_idle_a_slot_due_meanwhile_runs_once_after_the_restart(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.responder = lambda body: text("backup ok")
    gw = daemon(tmp_path / "home", fake_llm, telegram).start()
    try:
        job = {"schedule": "in 3s", "prompt": PROMPT, "deliver": "telegram:555"}
        job_id = api(gw, "POST", "", json=job)["job"]["id"]
        gw.kill()  # idle: the slot comes while nothing runs
        time.sleep(4)
        gw.start()
        runs = wait_until(lambda: settled(gw, job_id, 1), timeout=30)
    finally:
        gw.kill()
    [run] = runs
    assert run["status"] == "succeeded" and run["started_at"] > run["scheduled_for"] + 1
    check(gw, telegram, runs)
