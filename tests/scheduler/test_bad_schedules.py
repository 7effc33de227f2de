"""Schedules whose slots cannot be computed: refused before anything is stored, by the model's
`cronjob` tool, the control API and `hermes cron add`; and a row already in the store that
holds one (an older version's, or one written by hand) is listed with its error by every
listing, passed over by the timer (logged once), and the other jobs run on."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession
from structlog.testing import capture_logs

from hermes_gateway.cli.cron import run_cron
from hermes_gateway.cli.main import build_parser
from hermes_gateway.scheduler.jobs import Origin, new_job
from hermes_gateway.scheduler.rows import JOBS, job_row
from hermes_gateway.scheduler.schedule import Schedule, parse
from hermes_gateway.scheduler.scheduler import DUE_BATCH
from hermes_gateway.store.store import Store
from tests.fakes.openai import FakeOpenAI, Response, text, tool_calls
from tests.harness import Client, make_config, running_gateway
from tests.scheduler.test_cli import LOG_LINE
from tests.scheduler.test_ticker import T0, Clock, Turns, ticker

FAR = "in 99999999999d"  # the year 273792727
ALICE = Origin("api", "dm", "alice", None, "alice")  # the local API's chat of user alice


def scheduling(tmp_path: Path, llm: FakeOpenAI) -> Any:
    return make_config(
        tmp_path,
        llm.base_url,
        tools={"enabled": ["cronjob"]},
        scheduler={"enabled": True, "timezone": "UTC", "tick_s": 0.1, "min_interval_s": 1},
    )


class Model:
    """The chat's model calls `cronjob` with the arguments the test gives; what the tool
    answered the chat is kept (not what it answered a job's run, which the model answers
    too, at the same time)."""

    def __init__(self) -> None:
        self.call: dict[str, Any] = {}
        self.answers: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Response:
        last = body["messages"][-1]
        if last["role"] == "tool":
            if not any(
                str(m.get("content")).startswith("[Scheduled job") for m in body["messages"]
            ):
                self.answers.append(str(last["content"]))
            return text("done")
        return tool_calls(("cronjob", self.call))

    async def ask(self, client: Client, call: dict[str, Any]) -> str:
        self.call = call
        reply = await client.chat("do it")
        assert reply["status"] == 200, reply
        return self.answers[-1]


async def hermes_cron(client: Client, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    args: argparse.Namespace = build_parser().parse_args(["cron", *argv])
    token = client.operator["Authorization"].removeprefix("Bearer ")
    code = await asyncio.to_thread(run_cron, args, client.base, token)
    captured = capsys.readouterr()
    printed = captured.out.splitlines(keepends=True)  # the gateway logs to the same stdout
    return code, "".join(line for line in printed if not LOG_LINE.match(line)), captured.err


async def test_a_far_future_schedule_is_refused_everywhere_and_nothing_is_stored(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    model = Model()
    fake_llm.responder = model
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, client):
        assert gw.scheduler is not None
        ledger = gw.scheduler.ledger
        said = await model.ask(client, {"action": "create", "prompt": "p", "schedule": FAR})
        assert said.startswith("Error:") and "too far ahead" in said and "9999-12-30" in said
        async with client.http.post(
            f"{client.base}/v1/cron/jobs",
            json={"prompt": "p", "schedule": FAR},
            headers=client.operator,
        ) as resp:
            assert resp.status == 400
            assert "too far ahead" in (await resp.json())["error"]["message"]
        # what the store's columns could not keep (PostgreSQL refuses it) is refused too
        for body, says in (
            ({"schedule": "in 5m" + " 1m" * 66}, "schedule is longer than 200"),
            ({"schedule": "in 5m", "repeat": 10**12}, "repeat must be a whole number"),
        ):
            async with client.http.post(
                f"{client.base}/v1/cron/jobs", json={"prompt": "p"} | body, headers=client.operator
            ) as resp:
                assert resp.status == 400 and says in (await resp.json())["error"]["message"]
        code, _, err = await hermes_cron(client, capsys, "add", FAR, "p")
        assert code == 1 and "too far ahead" in err
        code, _, err = await hermes_cron(client, capsys, "add", "every 99999999999d", "p")
        assert code == 1 and "at most 24855 days" in err
        assert await ledger.jobs() == []
        # an edit is checked the same way: the job keeps its schedule
        made = await model.ask(client, {"action": "create", "prompt": "p", "schedule": "in 1h"})
        job_id = made.split()[2]
        edit = {"action": "update", "job_id": job_id, "schedule": FAR}
        assert "too far ahead" in await model.ask(client, edit)
        [job] = await ledger.jobs()
        assert job.schedule.text == "in 1h" and job.problem is None
        listed = await model.ask(client, {"action": "list"})
        assert job_id in listed and "next " in listed


def bad_rows(now: float) -> dict[str, dict[str, Any]]:
    """Rows no check of this version lets in, as an older version or a hand could write them;
    all in alice's chat, the last three due now."""
    good = job_row(new_job(name="x", prompt="p", schedule=parse("in 1h", "UTC", now),
                           origin=ALICE, now=now), now)  # fmt: skip
    due = int(now) - 5
    return {
        "far": good | {"id": "far1", "anchor": 8_640_001_796_432_418,
                       "next_run_at": 8_640_001_796_432_418},
        "kind": good | {"id": "kind1", "kind": "weekly", "next_run_at": due},
        "zone": good | {"id": "zone1", "kind": "cron", "schedule": "* * * * *",
                        "timezone": "Mars/Olympus", "next_run_at": due},
        "every": good | {"id": "every1", "kind": "interval", "every_s": 0, "next_run_at": due},
    }  # fmt: skip


async def put(store: Store, rows: list[dict[str, Any]]) -> None:
    async def write(db: AsyncSession) -> None:
        await db.execute(insert(JOBS), rows)

    await store.write(write)


async def jobs_event(client: Client) -> list[dict[str, Any]]:
    """The first `jobs` event of the dashboard's Jobs stream."""
    await client.dashboard_login()
    async with client.http.get(f"{client.base}/dashboard/events/jobs") as resp:
        assert resp.status == 200
        name = ""
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name == "jobs":
                found: list[dict[str, Any]] = json.loads(line[6:])["jobs"]
                return found
    raise AssertionError("the stream ended without a jobs event")


async def test_a_bad_row_is_listed_with_its_error_and_the_other_jobs_run_on(
    tmp_path: Path, fake_llm: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    model = Model()
    fake_llm.responder = model
    async with running_gateway(scheduling(tmp_path, fake_llm)) as (gw, client):
        assert gw.scheduler is not None
        job_service, ledger = gw.scheduler.job_service, gw.scheduler.ledger
        rows = bad_rows(time.time())
        await put(gw.store, list(rows.values()))
        bad = {row["id"] for row in rows.values()}
        good = await job_service.create(
            {"prompt": "tick", "schedule": "every 1s", "deliver": "none"}, None, "operator"
        )

        listed = await model.ask(client, {"action": "list"})
        assert all(f"{i} " in listed for i in bad) and listed.count("ERROR:") == 4
        assert "not a time" in listed and "weekly" in listed and "Mars/Olympus" in listed
        code, out, _ = await hermes_cron(client, capsys, "list")
        assert code == 0 and out.count(" error: ") == 4 and good.id in out
        status, body = await client.get("/v1/cron/jobs", operator=True)
        assert status == 200
        errors = {j["id"]: j["error"] for j in body["jobs"]}
        assert errors[good.id] is None and all(errors[i] for i in bad)
        shown = {j["id"]: j for j in await jobs_event(client)}
        assert shown.keys() == bad | {good.id}
        assert shown[good.id]["error"] == "" and all(shown[i]["error"] for i in bad)
        # the actions that need a slot say why not; removing works
        for action in ("run", "resume"):
            said = await model.ask(client, {"action": action, "job_id": "zone1"})
            assert f"cannot {action}" in said and "Mars/Olympus" in said
        assert (await model.ask(client, {"action": "remove", "job_id": "kind1"})).startswith(
            "Removed"
        )

        async def two_runs() -> bool:
            return len(await ledger.runs(good.id)) >= 2

        async with asyncio.timeout(60):
            while not await two_runs():
                await asyncio.sleep(0.1)
        assert set(ledger.set_aside) == {"zone1", "every1"}  # the due ones; kind1 is gone
        assert all(r.job_id == good.id for r in await ledger.runs())
        # a sound zone puts it back in service
        fix = {"action": "update", "job_id": "zone1", "timezone": "UTC"}
        assert (await model.ask(client, fix)).startswith("Updated zone1; next run 20")
        assert set(ledger.set_aside) == {"every1"}
        fixed = await ledger.get("zone1")
        assert fixed is not None and fixed.problem is None and fixed.next_run_at


async def test_the_timer_passes_bad_rows_over_logging_each_once(tmp_path: Path) -> None:
    """More bad due rows than one batch of due jobs: the good job is claimed in the first
    tick all the same, and each bad row is logged once, not at every tick."""
    store = Store(f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    await store.open()
    try:
        clock, turns = Clock(T0), Turns()
        sched = ticker(store, clock, turns)
        row = bad_rows(T0)["zone"]
        await put(store, [row | {"id": f"bad{i}", "next_run_at": int(T0) - 60 - i}
                          for i in range(DUE_BATCH + 20)])  # fmt: skip
        job = new_job(name="h", prompt="p", schedule=parse("0 * * * *", "UTC", T0),
                      origin=ALICE, now=T0)  # fmt: skip
        await sched.ledger.add(job, T0)
        clock.now = T0 + 3600
        with capture_logs() as logs:
            for _ in range(3):
                await sched.tick()
                await asyncio.gather(*sched._tasks)
                clock.now += 3600
        assert turns.slots == [int(T0) + 3600, int(T0) + 7200, int(T0) + 10800]
        unusable = [e for e in logs if e["event"] == "job.unusable"]
        assert len(unusable) == DUE_BATCH + 20
        assert {e["job_id"] for e in unusable} == {f"bad{i}" for i in range(DUE_BATCH + 20)}
        assert "Mars/Olympus" in unusable[0]["problem"]
        assert not [e for e in logs if e["event"] in ("scheduler.tick_crashed", "job.claimed")
                    and "bad0" in str(e.get("job_ids"))]  # fmt: skip
    finally:
        await store.close()


async def test_a_job_whose_plan_fails_is_set_aside_and_the_others_are_planned() -> None:
    """What no check foresaw (a schedule whose slot arithmetic fails) costs that job alone."""
    sched = ticker(None, Clock(T0), Turns())  # type: ignore[arg-type]  # planning reads nothing
    hourly = parse("0 * * * *", "UTC", T0)
    good = new_job(name="g", prompt="p", schedule=hourly, origin=ALICE, now=T0)
    broken = replace(good, id="broken", schedule=Schedule("interval", "every 0s", "UTC", 1, 0))
    broken = replace(broken, next_run_at=int(T0))
    planned = await sched._plan([broken, good], T0 + 3600, 3600)
    assert [job.id for job, _ in planned] == [good.id]
    assert "ZeroDivisionError" in sched.ledger.set_aside["broken"]
