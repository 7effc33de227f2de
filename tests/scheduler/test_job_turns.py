"""A job's run is a turn of its session through the gateway's runner: it waits behind a chat
turn running in that session (no two runs of a session overlap; the `latest` policy
supersedes it as it would a queued message, and its run says so), it holds the session while
it runs and frees it once its timeout cut it short (recorded `timed_out`), and an answer of
exactly `[SILENT]` is stored in the job's session, delivered nowhere and joins no chat."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from hermes_gateway.scheduler.jobs import Job
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, Response, hang, last_user_text, text
from tests.harness import dm, running_gateway
from tests.scheduler.test_runs import job_service, scheduling, until

PREFACE = "[Scheduled job"


async def run_now(gw: Gateway, job: Job) -> None:
    assert gw.scheduler is not None
    assert await gw.scheduler.scheduler.run_now(job) is not None


async def finished_run(gw: Gateway, job: Job) -> Any:
    async def probe() -> Any:
        runs = await job_service(gw).ledger.runs(job.id)
        return runs[0] if runs and runs[0].finished_at else None

    return await until(probe, timeout=20)


async def test_a_job_turn_waits_behind_a_chat_turn_of_its_session(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    def model(body: dict[str, Any]) -> Response:
        if last_user_text(body).startswith(PREFACE):
            return text("job done")
        return text("chat done", delay=1.5)  # still running when the job fires

    fake_llm.responder = model
    config = scheduling(tmp_path, fake_llm, run_timeout_s=30)
    config = config.model_copy(
        update={"runner": config.runner.model_copy(update={"busy_policy": "queue"})}
    )
    async with running_gateway(config) as (gw, _):
        job = await job_service(gw).create(
            {"prompt": "watch", "schedule": "every 1h"}, None, "operator"
        )
        chat = replace(dm("1", "hello"), session_key=job.session_key)
        await gw.runner.dispatch(chat, None)

        async def chat_running() -> bool:
            return bool(fake_llm.stats()["in_flight"])

        await until(chat_running, timeout=10)
        await run_now(gw, job)
        run = await finished_run(gw, job)
        assert (run.status, run.output) == ("succeeded", "job done")
        assert fake_llm.stats()["max_in_flight"] == 1  # the job's turn did not overlap the chat's
        firsts = [last_user_text(r) for r in fake_llm.requests]
        assert firsts[0] == "hello" and firsts[1].startswith(PREFACE)


async def test_a_waiting_job_turn_superseded_by_the_latest_policy_is_recorded_failed(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = lambda body: text("chat done", delay=1.0)
    config = scheduling(tmp_path, fake_llm)
    config = config.model_copy(
        update={"runner": config.runner.model_copy(update={"busy_policy": "latest"})}
    )
    async with running_gateway(config) as (gw, _):
        job = await job_service(gw).create(
            {"prompt": "watch", "schedule": "every 1h"}, None, "operator"
        )
        await gw.runner.dispatch(replace(dm("1", "hello"), session_key=job.session_key), None)
        await run_now(gw, job)  # it waits behind the chat's turn

        async def waiting() -> bool:
            return gw.runner.pending_count(job.session_key) == 1

        await until(waiting, timeout=10)
        again = replace(dm("2", "again"), session_key=job.session_key)
        await gw.runner.dispatch(again, None)
        run = await finished_run(gw, job)
        assert (run.status, run.error) == ("failed", "superseded")
        assert not any(last_user_text(r).startswith(PREFACE) for r in fake_llm.requests)


async def test_a_timed_out_job_turn_held_its_session_and_frees_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    def model(body: dict[str, Any]) -> Response:
        return hang(30) if last_user_text(body).startswith(PREFACE) else text("chat done")

    fake_llm.responder = model
    async with running_gateway(scheduling(tmp_path, fake_llm, run_timeout_s=1)) as (gw, _):
        job = await job_service(gw).create(
            {"prompt": "watch", "schedule": "every 1h"}, None, "operator"
        )
        await run_now(gw, job)

        async def held() -> bool:
            return gw.runner.busy(job.session_key)

        await until(held, timeout=10)  # the turn runs in the runner's session table
        run = await finished_run(gw, job)
        assert (run.status, run.error) == ("timed_out", "no answer within 1 s")
        assert not gw.runner.busy(job.session_key)
        assert gw.scheduler is not None and gw.scheduler.scheduler.outcomes["timed_out"] == 1


async def test_a_silent_answer_is_stored_delivered_nowhere_and_joins_no_chat(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = lambda body: text("[SILENT]")
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, _):
        alice = dm("1", "hi", chat="555", platform="api")
        d = job_service(gw)
        made = await d.from_tool(
            alice.session_key, alice, {"action": "create", "prompt": "p", "schedule": "every 1h"}
        )
        job = await d.ledger.get(made.split()[2])
        assert job is not None and job.deliver == "origin"
        await run_now(gw, job)
        run = await finished_run(gw, job)

        async def recorded() -> Any:
            [run] = await d.ledger.runs(job.id)
            return run if run.delivery != "pending" else None

        run = await until(recorded, timeout=10)
        assert (run.status, run.output, run.delivery) == ("succeeded", "[SILENT]", "skipped")
        assert await gw.store.history(alice.session_key) == []  # nothing joined the chat
        turn = await gw.store.history(job.session_key)
        assert [m["role"] for m in turn] == ["user", "assistant"]
        assert turn[-1]["content"] == "[SILENT]"
        # it ran as a turn of the runner, which timed it like any run
        sample = gw.metrics.registry.get_sample_value(
            "hermes_run_duration_seconds_count", {"status": "done"}
        )
        assert sample == 1
