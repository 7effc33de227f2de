"""`hermes cron` against a gateway running in this loop: add, list, pause, resume, run now,
runs, export-timer and rm, and the systemd calendar forms of cron expressions."""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hermes_gateway.cli.cron import run_cron
from hermes_gateway.cli.main import build_parser
from hermes_gateway.cli.status import gateway_status
from hermes_gateway.config import load_config
from hermes_gateway.control.token import operator_token
from hermes_gateway.scheduler.jobs import Origin, new_job
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import ScheduleError, parse
from hermes_gateway.scheduler.timer import on_calendar
from hermes_gateway.store.store import Store
from tests.e2e.daemon import free_port
from tests.fakes.openai import FakeOpenAI, text
from tests.harness import make_config, running_gateway

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[")  # the gateway's own, on stdout


@pytest.mark.parametrize(
    ("expr", "zone", "calendar"),
    [
        ("30 7 * * 1-5", "Europe/Berlin", "Mon..Fri *-*-* 07:30:00 Europe/Berlin"),
        ("*/15 * * * *", "UTC", "*-*-* *:00/15:00 UTC"),
        ("0 9 29 2 *", "America/New_York", "*-02-29 09:00:00 America/New_York"),
        ("0 8,20 1 * 0,6", "UTC", "Sun,Sat *-*-01 08,20:00:00 UTC"),
    ],
)
def test_cron_expressions_become_systemd_calendars(expr: str, zone: str, calendar: str) -> None:
    assert on_calendar(expr, zone) == calendar


def test_a_cron_field_systemd_cannot_say_is_refused() -> None:
    with pytest.raises(ScheduleError):
        on_calendar("0 9 * * 1-5/2", "UTC")


async def test_hermes_cron_through_the_control_api(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        scheduler={"enabled": True, "timezone": "Europe/Berlin", "tick_s": 0.1},
    )
    errors: list[str] = []
    async with running_gateway(config) as (gw, client):
        token = operator_token(None, config.home_path)  # the gateway's file, as the CLI reads it

        async def hermes(*argv: str) -> tuple[int, str]:
            args: argparse.Namespace = build_parser().parse_args(["cron", *argv])
            code = await asyncio.to_thread(run_cron, args, client.base, token)
            captured = capsys.readouterr()
            errors.append(captured.err)
            printed = captured.out.splitlines(keepends=True)
            return code, "".join(line for line in printed if not LOG_LINE.match(line))

        code, out = await hermes("add", "30 7 * * 1-5", "Summarize my feeds", "--name", "feeds")
        assert code == 0 and out.startswith("created job ")
        job_id = out.split()[2].rstrip(";")
        code, out = await hermes("list")
        assert job_id in out and "feeds" in out and "active" in out
        assert (await hermes("pause", job_id))[1].strip() == f"Paused {job_id}."
        assert "paused" in (await hermes("list"))[1]
        assert "Resumed" in (await hermes("resume", job_id))[1]
        code, out = await hermes("run", job_id)
        assert code == 0 and "is running now" in out
        code, out = await hermes("export-timer", job_id)
        assert "OnCalendar=Mon..Fri *-*-* 07:30:00 Europe/Berlin" in out
        assert f"cron run {job_id}" in out

        async def ran() -> str:
            out = (await hermes("runs", job_id))[1]
            return out if "succeeded" in out else ""

        async with asyncio.timeout(15):
            while not (out := await ran()):
                await asyncio.sleep(0.1)
        assert "manual" in out and "skipped" in out  # delivered nowhere: no target given
        report = io.StringIO()
        gw.scheduler.scheduler._counted_at = 0.0  # type: ignore[union-attr]  # count at once
        await asyncio.sleep(0.3)  # a tick
        await asyncio.to_thread(gateway_status, client.base, token, "not installed", report)
        assert "scheduler    1 job(s), 0 running, last tick" in report.getvalue()
        assert (await hermes("rm", job_id))[0] == 0
        assert "no scheduled jobs" in (await hermes("list"))[1]
        code, _ = await hermes("rm", job_id)
        assert code == 1 and "no job" in errors[-1]


async def test_hermes_cron_run_with_the_gateway_down_runs_the_turn_and_leaves_the_delivery(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """What an exported timer does when the gateway is down: the turn runs in the CLI, and its
    answer waits, pending and unowned, for the gateway to deliver it."""
    fake_llm.responder = lambda body: text("backup ok")
    config = make_config(
        tmp_path, fake_llm.base_url, control={"port": free_port()}, scheduler={"enabled": True}
    )
    store = Store(config.store_url)
    await store.open()
    ledger = Ledger(store, "test", 60)
    origin = Origin("telegram", "dm", "555", None, "555")
    now = time.time()
    job = new_job(
        name="b",
        prompt="Check the backup.",
        schedule=parse("every 1h", "UTC", now),
        origin=origin,
        now=now,
    )
    await ledger.add(job, now)
    command = [
        sys.executable,
        "-m",
        "hermes_gateway",
        "cron",
        "--config",
        str(tmp_path / "config.yaml"),
    ]
    done = await asyncio.to_thread(
        subprocess.run, [*command, "run", job.id], capture_output=True, text=True, timeout=120
    )
    try:
        assert done.returncode == 0, done.stderr
        assert "succeeded; delivery pending" in done.stdout
        [run] = await ledger.runs(job.id)
        assert (run.kind, run.status, run.delivery, run.output) == (
            "manual",
            "succeeded",
            "pending",
            "backup ok",
        )
        [adopted] = await Ledger(store, "gateway", 60).adopt_undelivered(time.time())
        assert adopted.id == run.id  # its lease was let go: a gateway takes it at once
    finally:
        await store.close()


def _unit_values(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


async def test_an_exported_timer_runs_its_job_in_a_non_default_home_with_the_gateway_down(
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The home comes from HERMES_HOME and the config from it, as a user with a second home
    runs the CLI; the unit must carry both, so that the timer's run, from a bare environment
    with the gateway down, finds the same store and job."""
    fake_llm.responder = lambda body: text("timer ran")
    home = tmp_path / "second home"
    home.mkdir()
    make_config(home, fake_llm.base_url, control={"port": free_port()}, scheduler={"enabled": True})
    data = yaml.safe_load((home / "config.yaml").read_text())
    del data["home"]  # the home is the environment's, as for `HERMES_HOME=... hermes cron`
    (home / "config.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("HERMES_HOME", str(home))
    config = load_config(None)
    units = tmp_path / "not yet" / "units"
    async with running_gateway(config) as (_, client):
        token = operator_token(None, config.home_path)

        def hermes(*argv: str) -> str:
            args = build_parser().parse_args(["cron", *argv])
            assert run_cron(args, client.base, token, config) == 0, capsys.readouterr().err
            printed = capsys.readouterr().out.splitlines(keepends=True)
            return "".join(line for line in printed if not LOG_LINE.match(line))

        job_id = (await asyncio.to_thread(hermes, "add", "every 1h", "Say hi.")).split()[2]
        job_id = job_id.rstrip(";")
        await asyncio.to_thread(hermes, "pause", job_id)  # only the timer fires it
        assert "wrote" in await asyncio.to_thread(
            hermes, "export-timer", job_id, "--dir", str(units)
        )
    service = (units / f"hermes-job-{job_id}.service").read_text()
    assert _unit_values(service, "EnvironmentFile") == [f"-{home.resolve()}/gateway.env"]
    if shutil.which("systemd-analyze"):
        done = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", *map(str, units.iterdir())],
            capture_output=True,
            text=True,
        )
        assert "hermes-job" not in done.stderr, done.stderr
    bare = tmp_path / "bare"  # the timer's user has a HOME of its own, no ~/.hermes in it
    bare.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env["HOME"] = str(bare)
    for pair in _unit_values(service, "Environment"):
        key, _, value = shlex.split(pair.replace("$$", "$").replace("%%", "%"))[0].partition("=")
        env[key] = value
    [exec_start] = _unit_values(service, "ExecStart")
    argv = shlex.split(exec_start.replace("$$", "$").replace("%%", "%"))
    done = await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=120, env=env, cwd=bare
    )
    assert done.returncode == 0, done.stderr
    assert "succeeded" in done.stdout
    store = Store(config.store_url)
    await store.open()
    try:
        [run] = await Ledger(store, "test", 60).runs(job_id)
        assert (run.status, run.output) == ("succeeded", "timer ran")
    finally:
        await store.close()
    assert not (bare / ".hermes").exists()
