"""The scheduler's side of the Jobs page (`JobsPage`): what a snapshot holds, run now, pause and
resume through it, an unknown job, and a run's answer carrying markup kept as plain text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.errors import RequestError
from hermes_gateway.scheduler.jobs_page import OUTPUT_CHARS, RUNS_SHOWN, JobsPage
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, Response, text
from tests.harness import make_config, running_gateway
from tests.integration.test_postgres import SERVER
from tests.scheduler.test_ledger import postgres_database

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    """The store section: the default SQLite file, or a database on the test PostgreSQL."""
    if request.param == "sqlite":
        yield {}
        return
    if not SERVER:
        pytest.skip("set HERMES_TEST_POSTGRES (CI does)")
    async with postgres_database() as url:
        yield {"url": url}


def scheduling(tmp_path: Path, llm: FakeOpenAI, store: dict[str, str] | None = None) -> Any:
    return make_config(
        tmp_path,
        llm.base_url,
        store=store or {},
        runner={"stop_grace_s": 0.2},
        tools={"enabled": ["cronjob"]},
        scheduler={"enabled": True, "timezone": "UTC", "tick_s": 0.1, "min_interval_s": 1},
    )


def jobs_page(gw: Gateway) -> JobsPage:
    assert gw.scheduler is not None and gw.dashboard is not None
    assert gw.dashboard.jobs is gw.scheduler.jobs_page  # the server wired the page to it
    return gw.scheduler.jobs_page


async def until(probe: Any, timeout: float = 20) -> Any:
    async with asyncio.timeout(timeout):
        while not (found := await probe()):
            await asyncio.sleep(0.05)
    return found


async def test_a_snapshot_lists_jobs_with_their_newest_runs(
    tmp_path: Path, fake_llm: FakeOpenAI, store: dict[str, str]
) -> None:
    fake_llm.responder = lambda body: text("x" * (OUTPUT_CHARS + 50))
    async with running_gateway(scheduling(tmp_path, fake_llm, store)) as (gw, _):
        b = jobs_page(gw)
        assert await b.snapshot() == []
        job_service = b.job_service
        often = await job_service.create(
            {"prompt": "tick", "schedule": "every 1s", "name": "often", "deliver": "none"},
            None,
            "operator",
        )
        later = await job_service.create(
            {"prompt": "later", "schedule": "0 9 * * *", "timezone": "Europe/Berlin"},
            None,
            "operator",
        )

        async def enough() -> list[dict[str, Any]]:
            jobs = await b.snapshot()
            done = [r for r in jobs[0]["runs"] if r["status"] == "succeeded"]
            return jobs if done and jobs[0]["runs_total"] > RUNS_SHOWN else []

        first, second = await until(enough, timeout=30)
        await job_service.act({"action": "pause", "job_id": often.id}, None, "operator")
        assert (first["id"], first["name"], first["schedule"]) == (often.id, "often", "every 1s")
        assert (second["id"], second["zone"], second["state"]) == (
            later.id,
            "Europe/Berlin",
            "active",
        )
        assert second["next_run"].endswith("09:00 Europe/Berlin") and second["runs"] == []
        assert second["chat"] == "none" and first["prompt"] == "tick"
        runs = first["runs"]
        assert len(runs) == RUNS_SHOWN < first["runs_total"]  # bounded: the newest only
        assert [r["id"] for r in runs] == sorted((r["id"] for r in runs), reverse=True)
        done = next(r for r in runs if r["status"] == "succeeded")
        assert done["delivery"] == "skipped" and done["slot"].endswith(" UTC")
        assert len(done["output"]) == OUTPUT_CHARS and done["output"].endswith("…")


async def test_run_now_pause_and_resume_act_on_the_job(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = lambda body: text("done")
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, _):
        b = jobs_page(gw)
        job = await b.job_service.create(
            {"prompt": "report", "schedule": "0 3 * * *", "name": "nightly"}, None, "operator"
        )
        paused = await b.act(job.id, "pause")
        assert paused["action"] == "pause" and "Paused" in paused["result"]
        [row] = await b.snapshot()
        assert (row["state"], row["next_run"]) == ("paused", "")
        resumed = await b.act(job.id, "resume")
        assert "Resumed" in resumed["result"]
        [row] = await b.snapshot()
        assert row["state"] == "active" and row["next_run"].endswith("03:00 UTC")

        ran = await b.act(job.id, "run")
        assert "running now" in ran["result"]

        async def finished() -> dict[str, Any] | None:
            [row] = await b.snapshot()
            runs = row["runs"]
            return runs[0] if runs and runs[0]["status"] == "succeeded" else None

        run = await until(finished)
        assert (run["kind"], run["output"], run["delivery"]) == ("manual", "done", "skipped")
        assert run["seconds"] is not None


async def test_an_unknown_job_or_action_is_refused(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, _):
        b = jobs_page(gw)
        for job_id in ("nosuchjob", "", "x" * 200):
            with pytest.raises(RequestError) as refused:
                await b.act(job_id, "run")
            assert refused.value.status == 404
        job = await b.job_service.create({"prompt": "p", "schedule": "0 3 * * *"}, None, "operator")
        with pytest.raises(RequestError) as refused:
            await b.act(job.id, "remove")  # the page offers no remove
        assert refused.value.status == 404
        assert (await b.snapshot())[0]["state"] == "active"


async def test_markup_in_a_jobs_answer_stays_plain_text(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    def model(body: dict[str, Any]) -> Response:
        return text(HOSTILE)

    fake_llm.responder = model
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, client):
        await client.dashboard_login()  # the dashboard wants the control token
        b = jobs_page(gw)
        job = await b.job_service.create(
            {"prompt": HOSTILE, "schedule": "0 3 * * *", "name": HOSTILE}, None, "operator"
        )
        await b.act(job.id, "run")

        async def answered() -> dict[str, Any] | None:
            [row] = await b.snapshot()
            return row if row["runs"] and row["runs"][0]["status"] == "succeeded" else None

        row = await until(answered)
        # text, neither escaped twice nor turned into markup: the page sets it as textContent
        assert row["name"] == HOSTILE and row["prompt"] == HOSTILE
        assert row["runs"][0]["output"] == HOSTILE
        base = f"{client.base}/dashboard"
        async with client.http.get(f"{base}/jobs") as resp:
            html = await resp.text()
        assert resp.status == 200 and "<script>window" not in html and 'id="jobs"' in html
