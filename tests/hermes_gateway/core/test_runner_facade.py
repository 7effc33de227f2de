"""The runner's narrow facade: a run's state moves only along its lifecycle, and no module but
the runner's own touches a `Run` or the session table."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import pytest

from hermes_gateway.core.run import IllegalMove, Run, RunState
from hermes_gateway.core.sessions import Pending
from tests.fakes.openai import FakeOpenAI, hang
from tests.harness import eventually, make_config, running_gateway

ROOT = Path(__file__).resolve().parents[3]
OWNERS = {"runner.py", "run.py", "sessions.py", "settle.py"}  # in hermes_gateway/
RUN_MEMBERS = {f.name for f in dataclasses.fields(Run)} | {
    name for name, v in vars(Run).items() if isinstance(v, property) or callable(v)
}
S = RunState


def _product_files() -> list[Path]:
    files = sorted((ROOT / "adapters").rglob("*.py"))
    files += [p for p in sorted((ROOT / "hermes_gateway").rglob("*.py")) if p.name not in OWNERS]
    return files


def _run(*moves: RunState) -> Run:
    run = Run("api:dm:a", [])
    for to in moves:
        run.move(to)
    return run


def test_no_module_outside_the_runner_touches_runs_or_the_session_table() -> None:
    table = re.compile(r"\.(_?table)\b(?!_)")
    run_member = re.compile(r"\b(?:run|nxt|old_run|active)\.(\w+)")
    private = re.compile(r"\brunner\._\w+")
    found: list[str] = []
    for path in _product_files():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            if table.search(line) and "runner" in line:
                found.append(where)
            if any(m in RUN_MEMBERS for m in run_member.findall(line)):
                found.append(where)
            if private.search(line) or re.search(r"import .*\b(Run|SessionTable)\b", line):
                found.append(where)
    assert not found, "use GatewayRunner's methods instead:\n" + "\n".join(found)


def test_the_guard_sees_a_violation() -> None:
    assert {"stopped", "persist_task", "items", "move", "state"} <= RUN_MEMBERS


@pytest.mark.parametrize(
    "moves",
    [
        (S.SETTLING, S.DONE),
        (S.INTERRUPTING, S.SETTLING, S.DONE),
        (S.INTERRUPTING, S.ABANDONED),
        (S.SETTLING, S.DETACHED),
        (S.SETTLING, S.SHUTTING_DOWN, S.DONE),
        (S.SHUTTING_DOWN, S.ABANDONED),
        (S.DONE,),  # crashed or store unavailable: no result to settle
    ],
)
def test_the_lifecycle_allows_its_steps(moves: tuple[RunState, ...]) -> None:
    assert _run(*moves).state is moves[-1]


@pytest.mark.parametrize(
    ("moves", "illegal"),
    [
        ((S.DONE,), S.RUNNING),
        ((S.ABANDONED,), S.SETTLING),  # its late result is never settled
        ((S.ABANDONED,), S.DONE),  # it gave up the guard: it must not hand it over
        ((S.DETACHED,), S.DONE),
        ((S.SHUTTING_DOWN,), S.SETTLING),  # would store a turn the replay answers again
        ((S.SETTLING,), S.INTERRUPTING),
        ((S.SHUTTING_DOWN,), S.DETACHED),
    ],
)
def test_an_illegal_move_raises(moves: tuple[RunState, ...], illegal: RunState) -> None:
    run = _run(*moves)
    with pytest.raises(IllegalMove):
        run.move(illegal)
    assert run.state is moves[-1]


def test_stopped_and_shutdown_follow_the_state() -> None:
    assert not _run().stopped and not _run().shutdown
    assert _run(S.ABANDONED).stopped and _run(S.SETTLING, S.DETACHED).stopped
    assert _run(S.SHUTTING_DOWN).shutdown and not _run(S.SHUTTING_DOWN).stopped


async def test_the_facade_shows_a_run_from_start_to_stop(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(hang(10))
    key = "api:dm:alice"
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        first = asyncio.create_task(client.chat("think hard"))
        await eventually(lambda: len(fake_llm.requests) == 1)
        view = gw.runner.describe(key)
        event = gw.runner.current_event(key)
        assert gw.runner.busy(key) and view.state is RunState.RUNNING and view.pending == 0
        assert event is not None and event.text == "think hard"
        assert [e.text for e in gw.runner.current_messages(key)] == ["think hard"]
        assert gw.runner.counts()["active"] == 1
        stopped = gw.runner.stop(key)
        assert stopped is not None and [p.event.text for p in stopped.answering] == ["think hard"]
        await stopped.recorded()
        assert not gw.runner.busy(key) and gw.runner.describe(key).state is None
        assert gw.runner.current_event(key) is None and gw.runner.stop(key) is None
        first.cancel()
        # replay's way in: a resumed item starts a run of its own on an idle session
        fake_llm.push(hang(10))
        assert event is not None
        gw.runner.resume([Pending(event, None)])
        await eventually(lambda: gw.runner.describe(key).state is RunState.RUNNING)
        assert gw.runner.stop(key) is not None
