"""Job runs inside a gateway running in this loop: a run that hangs past its timeout is
`timed_out` and the next slot runs on time; a chat sees and changes only its own jobs, the
model cannot name another chat, and a job's own run creates no jobs unless allowed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.scheduler.job_service import JobService, JobServiceError
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, Response, hang, text
from tests.harness import dm, make_config, running_gateway
from tools.registry import ToolContext


def scheduling(tmp_path: Path, llm: FakeOpenAI, **scheduler: Any) -> Any:
    return make_config(
        tmp_path,
        llm.base_url,
        runner={"stop_grace_s": 0.2, "workers": 4},
        tools={"enabled": ["cronjob"]},
        scheduler={"enabled": True, "timezone": "UTC", "tick_s": 0.1, "min_interval_s": 1}
        | scheduler,
    )


async def until(probe: Any, timeout: float) -> Any:
    """Await ``probe()`` until it returns something truthy."""
    async with asyncio.timeout(timeout):
        while not (found := await probe()):
            await asyncio.sleep(0.05)
    return found


def job_service(gateway: Gateway) -> JobService:
    assert gateway.scheduler is not None
    return gateway.scheduler.job_service


async def test_a_hung_run_times_out_and_the_next_slot_runs_on_time(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    calls: list[str] = []

    def model(body: dict[str, Any]) -> Response:
        calls.append("call")
        return hang(30) if len(calls) == 1 else text("all quiet")

    fake_llm.responder = model
    async with running_gateway(scheduling(tmp_path, fake_llm, run_timeout_s=1)) as (gw, _):
        d = job_service(gw)
        job = await d.create({"prompt": "watch", "schedule": "every 3s"}, None, "operator")

        async def two_runs() -> list[Any]:
            runs = await d.ledger.runs(job.id)
            return runs if len(runs) == 2 and all(r.finished_at for r in runs) else []

        second, first = await until(two_runs, timeout=20)
        assert (first.status, first.error) == ("timed_out", "no answer within 1 s")
        assert first.delivery == "skipped"  # nowhere to deliver: an operator's job, no target
        assert (second.status, second.kind, second.output) == (
            "succeeded",
            "scheduled",
            "all quiet",
        )
        assert second.scheduled_for == first.scheduled_for + 3
        assert gw.scheduler is not None and gw.scheduler.scheduler.outcomes["timed_out"] == 1


async def test_a_chat_sees_and_changes_only_its_own_jobs(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, _):
        d = job_service(gw)
        # chats on the local API: Telegram is off here, and a job may deliver only to a
        # platform that is on (the API's answers stay in the job's runs)
        alice = dm("1", "hi", chat="555", platform="api")
        bob = dm("2", "hi", chat="777", platform="api")
        made = await d.from_tool(
            alice.session_key, alice, {"action": "create", "prompt": "p", "schedule": "every 1h"}
        )
        job_id = made.split()[2]
        assert job_id in await d.command(alice, "")
        assert await d.command(bob, "") == "No scheduled jobs in this chat."
        for action in ("remove", "pause", "run", "runs", "update"):
            with pytest.raises(JobServiceError, match="no job"):
                await d.from_tool(bob.session_key, bob, {"action": action, "job_id": job_id})
        assert "no job" in await d.command(bob, f"rm {job_id}")
        assert await d.ledger.get(job_id) is not None  # untouched
        # a job's own run acts for its chat: it may list, not create (off by default)
        mine = f"cron:{job_id}"
        assert job_id in await d.from_tool(mine, None, {"action": "list"})
        with pytest.raises(JobServiceError, match="cannot create"):
            await d.from_tool(mine, None, {"action": "create", "prompt": "p", "schedule": "in 5m"})
        change = {"action": "update", "job_id": job_id, "schedule": "every 2h", "deliver": "none"}
        assert (await d.from_tool(alice.session_key, alice, change)).startswith("Updated")
        updated = await d.ledger.get(job_id)
        assert updated is not None and (updated.schedule.every_s, updated.deliver) == (7200, "none")
        assert await d.command(alice, f"rm {job_id}") == f"Removed {job_id}."


async def test_the_tool_takes_the_chat_from_the_run_never_from_the_model(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, _):
        registry, _prompt = gw.agent_factory.toolset("telegram")
        ctx = ToolContext(workspace=tmp_path, session_key="telegram:dm:555", host=gw.tool_host.host)
        forged = '{"action": "list", "chat_id": "777"}'
        outcome = await asyncio.to_thread(registry.dispatch, "cronjob", forged, ctx)
        assert not outcome.ok and "chat_id" in outcome.content
        # no run answers a message in that session now: nobody to act for
        outcome = await asyncio.to_thread(registry.dispatch, "cronjob", '{"action": "list"}', ctx)
        assert not outcome.ok and "only from a chat" in outcome.content
