"""A job may deliver only where a run could deliver: a platform off in the config is refused
when the job is made or changed, by `hermes cron add`, `POST /v1/cron/jobs` and the `cronjob`
tool alike, naming `platforms.<name>.enabled`, instead of failing at its first run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from hermes_gateway.cli.cron import run_cron
from hermes_gateway.cli.main import build_parser
from hermes_gateway.control.token import operator_token
from hermes_gateway.scheduler.job_service import JobService, JobServiceError
from hermes_gateway.scheduler.jobs import Origin, new_job
from hermes_gateway.scheduler.schedule import parse
from tests.fakes.openai import FakeOpenAI
from tests.harness import dm, make_config, running_gateway

OFF = "platforms.telegram.enabled"


async def test_a_disabled_platform_is_refused_by_every_way_a_job_is_made(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(tmp_path, fake_llm.base_url, scheduler={"enabled": True})
    async with running_gateway(config) as (gw, client):
        assert gw.scheduler is not None
        job_service, ledger = gw.scheduler.job_service, gw.scheduler.ledger
        # the operator's CLI
        token = operator_token(None, config.home_path)
        args = build_parser().parse_args(
            ["cron", "add", "in 1h", "Say hi.", "--deliver", "telegram:123"]
        )
        assert await asyncio.to_thread(run_cron, args, client.base, token) == 1
        assert OFF in capsys.readouterr().err
        # the control API
        body = {"schedule": "in 1h", "prompt": "Say hi.", "deliver": "telegram:123"}
        async with client.http.post(
            f"{client.base}/v1/cron/jobs", json=body, headers=client.operator
        ) as response:
            assert response.status == 400 and OFF in await response.text()
        # a name no platform has, and one that cannot send unasked
        for deliver, why in (("telgram:1", "no platform 'telgram'"), ("api:1", "unasked")):
            with pytest.raises(JobServiceError, match=why):
                await job_service.create(
                    {"prompt": "p", "schedule": "in 1h", "deliver": deliver}, None, "o"
                )
        # the model's tool, in a Telegram chat (a gateway whose config has Telegram off)
        chat = dm("1", "hi", chat="555")
        create = {"action": "create", "prompt": "p", "schedule": "in 1h"}
        with pytest.raises(JobServiceError, match=OFF):
            await job_service.from_tool(chat.session_key, chat, create)
        # and its update, of a job made while Telegram was on
        now = time.time()
        job = new_job(
            name="old",
            prompt="p",
            schedule=parse("every 1h", "UTC", now),
            origin=Origin("telegram", "dm", "555", None, "555"),
            now=now,
            deliver="none",
        )
        await ledger.add(job, now)
        update = {"action": "update", "job_id": job.id, "deliver": "origin"}
        with pytest.raises(JobServiceError, match=OFF):
            await job_service.from_tool(chat.session_key, chat, update)
        assert [j.id for j in await ledger.jobs()] == [job.id]  # nothing was made
        stored = await ledger.get(job.id)
        assert stored is not None and stored.deliver == "none"  # nor changed
        # a job service told Telegram is on takes the same job
        on = JobService(
            ledger, gw.scheduler.scheduler, lambda: config.scheduler, "UTC", frozenset({"telegram"})
        )
        made = await on.create(
            {"prompt": "p", "schedule": "in 1h", "deliver": "telegram:123"}, None, "o"
        )
        assert made.deliver == "telegram:123"
