"""Traces of their own, linked to what caused them: a scheduled job's run is a `job.run` root
(its run under it) linked to the job's previous run; a message's trace is kept with its inbox
row; a message replayed after a restart runs under a new `replay` root linked to that trace."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from hermes_gateway.config import Config
from hermes_gateway.store.store import Store
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.otlp import Receiver, attrs
from tests.harness import dm, eventually, make_config, running_gateway
from tests.scheduler.test_job_turns import finished_run, run_now
from tests.scheduler.test_runs import job_service, scheduling, until

pytest.importorskip("opentelemetry.sdk")

PROMPT = "count the zebra herd"
PRIVATE = "my private okapi words"
# a traceparent an earlier process stored with the message (version, trace, span, sampled)
EARLIER = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"


def traced(config: Config, receiver: Receiver) -> Config:
    traces = {"enabled": True, "endpoint": receiver.endpoint, "schedule_delay_s": 0.1}
    observability = config.observability.model_copy(
        update={"traces": config.observability.traces.model_copy(update=traces)}
    )
    return config.model_copy(update={"observability": observability})


def no_private_words(receiver: Receiver, *words: str) -> None:
    with receiver.lock:
        everything = " ".join(str(attrs(s)) + s.name for _r, s in receiver.spans)
    for word in words:
        assert word not in everything


async def test_a_job_run_is_a_trace_linked_to_the_jobs_previous_run(
    tmp_path: Path, fake_llm: FakeOpenAI, receiver: Receiver
) -> None:
    fake_llm.responder = lambda body: text("job done")
    async with running_gateway(traced(scheduling(tmp_path, fake_llm), receiver)) as (gw, _):
        job = await job_service(gw).create(
            {"prompt": PROMPT, "schedule": "every 1h"}, None, "operator"
        )
        assert gw.scheduler is not None
        scheduler = gw.scheduler.scheduler
        await run_now(gw, job)
        await finished_run(gw, job)

        async def again() -> bool:  # once the first run is over (its delivery too)
            return await scheduler.run_now(job) is not None

        await until(again, timeout=10)
        await eventually(lambda: scheduler.running == 0 and not scheduler._live, timeout=15)
        await eventually(lambda: len(receiver.named().get("job.run", [])) >= 2, timeout=15)
        await eventually(lambda: len(receiver.named().get("run", [])) >= 2, timeout=15)
    spans = receiver.named()
    first, second = sorted(spans["job.run"], key=lambda s: s.start_time_unix_nano)
    assert first.parent_span_id == b"" and second.parent_span_id == b""
    assert first.trace_id != second.trace_id
    assert list(first.links) == []
    (link,) = second.links
    assert (link.trace_id, link.span_id) == (first.trace_id, first.span_id)
    for root in (first, second):
        (run,) = [s for s in spans["run"] if s.trace_id == root.trace_id]
        assert run.parent_span_id == root.span_id
        assert attrs(run)["hermes.job"] is True
        assert attrs(root)["hermes.job.schedule"] == "interval"
        assert attrs(root)["hermes.job.status"] == "succeeded"
        assert len(attrs(root)["hermes.job.hash"]) == 16
    model_calls = spans["model.call"]
    assert {s.trace_id for s in model_calls} == {first.trace_id, second.trace_id}
    no_private_words(receiver, "zebra", job.id, "job done")


def _trace_column(config: Config) -> list[str | None]:
    path = config.store_url.removeprefix("sqlite+aiosqlite:///")
    with sqlite3.connect(path) as db:
        return [row[0] for row in db.execute("SELECT trace FROM inbox ORDER BY id")]


async def test_a_messages_trace_is_kept_with_its_inbox_row(
    tmp_path: Path, fake_llm: FakeOpenAI, receiver: Receiver
) -> None:
    fake_llm.push(text("fine"))
    config = traced(make_config(tmp_path, fake_llm.base_url), receiver)
    async with running_gateway(config) as (_gw, client):
        assert (await client.chat(PRIVATE))["text"] == "fine"
        await eventually(lambda: "message" in receiver.named(), timeout=15)
    (message,) = receiver.named()["message"]
    (stored,) = _trace_column(config)
    assert stored is not None
    assert stored.startswith(f"00-{message.trace_id.hex()}-{message.span_id.hex()}-")


async def test_a_replayed_message_runs_in_a_new_trace_linked_to_its_first(
    tmp_path: Path, fake_llm: FakeOpenAI, receiver: Receiver
) -> None:
    config = traced(make_config(tmp_path, fake_llm.base_url), receiver)
    store = Store(config.store_url)  # what a crash left: a message accepted, never answered
    await store.open()
    try:
        await store.accept(replace(dm("7", PRIVATE, platform="api"), trace=EARLIER))
    finally:
        await store.close()
    fake_llm.push(text("answered after the restart"))
    async with running_gateway(config) as _:
        await eventually(lambda: "run" in receiver.named(), timeout=15)
    spans = receiver.named()
    (root,) = spans["replay"]
    (run,) = spans["run"]
    assert root.parent_span_id == b"" and root.trace_id != bytes.fromhex("ab" * 16)
    (link,) = root.links
    assert (link.trace_id.hex(), link.span_id.hex()) == ("ab" * 16, "cd" * 8)
    assert attrs(root)["hermes.replay.kind"] == "rerun"
    assert (run.trace_id, run.parent_span_id) == (root.trace_id, root.span_id)
    no_private_words(receiver, "okapi", "answered after")


async def test_status_and_the_session_page_show_the_sessions_latest_traces(
    tmp_path: Path, fake_llm: FakeOpenAI, receiver: Receiver
) -> None:
    token = "t0ken-0123456789abcdef"
    fake_llm.push(text("one"), text("two"))
    config = make_config(tmp_path, fake_llm.base_url, control={"token": token})
    async with running_gateway(traced(config, receiver)) as (gw, client):
        client.http.headers["Authorization"] = f"Bearer {token}"
        for _ in range(2):
            assert (await client.chat(PRIVATE, user="carol"))["status"] == 200
        status = (await client.chat("/status", user="carol"))["text"]
        cookie = gw.dashboard.auth.login(token)
        url = f"http://127.0.0.1:{gw.control.port}/dashboard/session?key=api:dm:carol"
        async with client.http.get(url, headers={"Cookie": f"hermes_dashboard={cookie}"}) as r:
            page = await r.text()
        await eventually(lambda: len(receiver.named().get("run", [])) >= 2, timeout=15)
    runs = sorted(receiver.named()["run"], key=lambda s: s.start_time_unix_nano, reverse=True)
    ids = [run.trace_id.hex() for run in runs]
    assert f"Traces: {ids[0]}, {ids[1]}" in status
    assert all(f'<code class="trace-id">{i}</code>' in page for i in ids)


async def test_status_shows_no_traces_when_they_are_off(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("one"))
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (_gw, client):
        assert (await client.chat(PRIVATE, user="carol"))["status"] == 200
        status = (await client.chat("/status", user="carol"))["text"]
    assert "Session: api:dm:carol" in status and "Traces" not in status
