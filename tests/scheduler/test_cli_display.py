"""What `hermes cron` prints: times in the job's zone with the zone named (not UTC whatever
`scheduler.timezone` says), and `hermes cron runs --full` for outputs the table cuts."""

from __future__ import annotations

import argparse
import asyncio
import re
from pathlib import Path

import pytest

from hermes_gateway.cli.cron import run_cron
from hermes_gateway.cli.main import build_parser
from hermes_gateway.control.token import operator_token
from tests.fakes.openai import FakeOpenAI, text
from tests.harness import make_config, running_gateway

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")  # the gateway's own, on stdout
# an answer longer than a table cell and than a listing keeps (500), over several lines
ANSWER = "Feeds today:\n" + "\n".join(f"- story {i}: " + "x" * 40 for i in range(12)) + "\nEND"


async def test_times_are_shown_in_the_jobs_zone_and_runs_full_shows_whole_outputs(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_llm.responder = lambda body: text(ANSWER)
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        scheduler={"enabled": True, "timezone": "Europe/Berlin", "tick_s": 0.1},
    )
    async with running_gateway(config) as (_, client):
        token = operator_token(None, config.home_path)

        async def hermes(*argv: str) -> str:
            args: argparse.Namespace = build_parser().parse_args(["cron", *argv])
            code = await asyncio.to_thread(run_cron, args, client.base, token, config)
            captured = capsys.readouterr()
            assert code == 0, captured.err
            lines = captured.out.splitlines(keepends=True)
            return "".join(line for line in lines if not LOG_LINE.match(line))

        out = await hermes("add", "30 7 * * *", "Summarize my feeds")
        assert re.search(r"first run \d{4}-\d\d-\d\d 07:30 Europe/Berlin$", out.strip()), out
        job_id = out.split()[2].rstrip(";")
        await hermes("add", "0 9 * * *", "Other", "--timezone", "America/New_York")
        listed = await hermes("list")
        assert re.search(rf"{job_id} .* 07:30 Europe/Berlin ", listed), listed
        assert re.search(r" 09:00 America/New_York ", listed), listed
        assert "UTC" not in listed
        await hermes("run", job_id)

        async def ran() -> str:
            out = await hermes("runs", job_id)
            return out if "succeeded" in out else ""

        async with asyncio.timeout(15):
            while not (short := await ran()):
                await asyncio.sleep(0.1)
        assert "Europe/Berlin" in short and "END" not in short  # cut to its cell
        assert "--full" in short  # and the table says how to see it whole
        whole = await hermes("runs", job_id, "--full")
        for line in ANSWER.splitlines():
            assert line in whole  # every line of it, as written
    with pytest.raises(SystemExit):
        build_parser().parse_args(["cron", "runs", "--help"])
    assert "--full" in capsys.readouterr().out
