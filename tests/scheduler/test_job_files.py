"""A scheduled job's answer takes files (`send_file`) as a chat's does: checked at tool time
against the job's target platform (Telegram here, not `cron`), sent after the text as parts of
their own, recorded on the run so a delivery taken over after a crash sends them once; a job
whose answer goes to no chat is told so, and a `[SILENT]` answer sends its files neither."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.events import OutboundFile
from hermes_gateway.scheduler.jobs import Job
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.telegram import FakeTelegram
from tests.harness import make_config, running_gateway
from tests.scheduler.test_job_turns import finished_run, run_now
from tests.scheduler.test_runs import job_service, until

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
CHAT = 1001
CSV = "a,b\n1,2\n"
ANSWER = "Here is this week's report."


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    fake = FakeTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


def config(tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram) -> Any:
    telegram = {
        "enabled": True,
        "token": tg.token,
        "base_url": tg.api_url,
        "base_file_url": tg.file_url,
        "allowed_users": [CHAT],
    }
    return make_config(
        tmp_path,
        llm.base_url,
        runner={"stop_grace_s": 0.2, "workers": 4},
        tools={"enabled": ["cronjob", "write_file", "send_file"]},
        scheduler={"enabled": True, "timezone": "UTC", "tick_s": 0.1, "min_interval_s": 1},
        platforms={"telegram": telegram},
    )


async def make_job(gw: Gateway, deliver: str = f"telegram:{CHAT}") -> Job:
    body = {"prompt": "the weekly report", "schedule": "every 1h", "deliver": deliver}
    return await job_service(gw).create(body, None, "operator")


async def settled(gw: Gateway, job: Job) -> Any:
    """The job's one run, once its delivery is recorded."""

    async def probe() -> Any:
        runs = await job_service(gw).ledger.runs(job.id)
        return runs[0] if runs and runs[0].delivery != "pending" else None

    return await until(probe, timeout=20)


def shown(tg: FakeTelegram) -> list[tuple[Any, ...]]:
    """What the chat shows, in order: (text, the text) or (document, name, bytes, caption)."""
    seen: list[tuple[int, tuple[Any, ...]]] = [
        (m["message_id"], ("text", m["text"])) for m in tg.messages_to(CHAT)
    ]
    for u in tg.uploads:
        seen.append((u["message_id"], ("document", u["file_name"], u["data"], u.get("caption"))))
    return [what for _, what in sorted(seen, key=lambda item: item[0])]


def told(llm: FakeOpenAI) -> list[str]:
    """What the tools answered the model, in the last request of the turn."""
    return [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]


async def test_a_job_sends_its_text_then_its_file_to_its_telegram_chat(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(
        tool_calls(("write_file", {"path": "report.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "report.csv", "caption": "the numbers"})),
        text(ANSWER),
    )
    async with running_gateway(config(tmp_path, fake_llm, tg)) as (gw, _):
        job = await make_job(gw)
        await run_now(gw, job)

        run = await settled(gw, job)
    assert "will be sent after your answer" in told(fake_llm)[1]
    assert shown(tg) == [
        ("text", ANSWER),
        ("document", "report.csv", CSV.encode(), "the numbers"),
    ]
    assert run.delivery == "delivered"
    assert [f.name for f in run.files] == ["report.csv"]  # kept with the run's output


async def test_a_file_over_the_targets_limit_is_refused_to_the_model(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(tool_calls(("send_file", {"path": "huge.bin"})), text("Too big to send."))
    cfg = config(tmp_path, fake_llm, tg)
    cfg.workspace_path.mkdir(parents=True, exist_ok=True)
    with (cfg.workspace_path / "huge.bin").open("wb") as fh:  # sparse: 51 MB on paper
        fh.truncate(51 * 1024 * 1024)
    async with running_gateway(cfg) as (gw, _):
        job = await make_job(gw)
        await run_now(gw, job)
        await settled(gw, job)
    refusal = told(fake_llm)[0]
    assert "51.0 MB" in refusal and "telegram takes files up to 50.0 MB" in refusal
    assert shown(tg) == [("text", "Too big to send.")]


async def test_a_job_whose_answer_goes_to_no_chat_is_told_no_file_can_go(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(
        tool_calls(("write_file", {"path": "r.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "r.csv"})),
        text("done"),
    )
    async with running_gateway(config(tmp_path, fake_llm, tg)) as (gw, _):
        job = await make_job(gw, deliver="none")
        await run_now(gw, job)
        run = await finished_run(gw, job)
    assert "delivers its answer to no chat" in told(fake_llm)[1]
    assert (run.status, run.delivery, run.files) == ("succeeded", "skipped", ())


async def test_a_silent_answer_sends_its_files_neither(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(
        tool_calls(("write_file", {"path": "r.csv", "content": CSV})),
        tool_calls(("send_file", {"path": "r.csv"})),
        text("[SILENT]"),
    )
    async with running_gateway(config(tmp_path, fake_llm, tg)) as (gw, _):
        job = await make_job(gw)
        await run_now(gw, job)
        run = await settled(gw, job)
    assert "If you answer exactly [SILENT], nothing is sent" in told(fake_llm)[1]
    assert (run.status, run.delivery) == ("succeeded", "skipped")
    assert shown(tg) == []


async def test_a_delivery_taken_over_after_a_crash_sends_the_file_once(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    cfg = config(tmp_path, fake_llm, tg)
    cfg.workspace_path.mkdir(parents=True, exist_ok=True)
    report = cfg.workspace_path / "report.csv"
    report.write_text(CSV)
    async with running_gateway(cfg) as (gw, _):
        job = await make_job(gw)
        # another gateway ran the job and sent the text, then died before the file went out:
        # its lease lapses at once, so this gateway's next tick takes the delivery over
        crashed = Ledger(gw.store, "crashed", 0)
        now = time.time()
        run_id = await crashed.claim_now(job, now)
        assert run_id is not None and await crashed.start(run_id, now)
        file = OutboundFile(str(report), "report.csv", "the numbers", "document")
        assert await crashed.finish(run_id, "succeeded", now, ANSWER, None, "pending", (file,))
        await crashed.delivered(run_id, "pending", 1)

        run = await settled(gw, job)
    assert shown(tg) == [("document", "report.csv", CSV.encode(), "the numbers")]  # once
    assert run.delivery == "delivered"
    assert fake_llm.requests == []  # taken over from the ledger: no new model call
