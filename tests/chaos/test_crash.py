"""Crash chaos against the real daemon: SIGKILL at every kind of moment, restart, and count what
the users got. Nothing may be lost; a doubled answer is allowed only for a kill that landed
between Telegram taking a reply and the gateway recording it as answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.crash import CrashReport, run_crash_chaos
from tests.chaos.kit import env_number, record
from tests.fakes.openai import FakeOpenAI
from tests.security import keys

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]


def check(report: CrashReport) -> None:
    f = report.figures
    assert report.exit_code == 0
    assert f["never_answered"] == 0, f"lost: {report.lost[:20]} kills: {report.kills}"
    assert f["misrouted"] == 0 and f["error_replies"] == 0, f
    assert report.doubles_explained, f"doubled outside the send window: {report.doubled}"
    assert f["accepted"] == f["sent"], f
    keys.assert_no_leaks(report.log_paths)


def test_a_few_kills_lose_nothing(tmp_path: Path, llm: FakeOpenAI) -> None:
    """The CI variant: one kill while receiving, one in a model call, one inside a tool."""
    report = run_crash_chaos(
        tmp_path, llm, rounds=3, chats=4, seed=7, settle=(0.3, 0.8), min_sent=6
    )
    check(report)
    assert report.figures["sent"] >= 6


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_many_kills_lose_nothing(tmp_path: Path, llm: FakeOpenAI) -> None:
    rounds = int(env_number("HERMES_CHAOS_ROUNDS", 60))
    seed = int(env_number("HERMES_CHAOS_SEED", 1))
    report = run_crash_chaos(tmp_path, llm, rounds=rounds, chats=8, seed=seed)
    record("crash", report.figures)
    check(report)
