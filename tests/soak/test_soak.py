"""Soak tests: a steady load on the daemon, memory flat within 10% after warm-up, no file
descriptor or thread leak, the loop never stalls, every message answered exactly once.

CI runs 15 seconds; the slow suite runs `HERMES_SOAK_SECONDS` (default 600) at
`HERMES_SOAK_RATE` messages per second (default 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.kit import env_number, record
from tests.fakes.openai import FakeOpenAI
from tests.security import keys
from tests.soak.soak import SoakReport, run_soak

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]


def check(report: SoakReport, fd_slack: float, thread_slack: float) -> None:
    f = report.figures
    assert report.exit_code == 0
    assert f["never_answered"] == 0 and f["answered_twice"] == 0, f
    assert f["error_replies"] == 0 and f["misrouted"] == 0, f
    assert f["accepted"] == f["sent"], f
    assert f["rss_growth_pct"] <= 10, f
    assert f["fds_end"] <= f["fds_start"] + fd_slack, f
    assert f["threads_end"] <= f["threads_start"] + thread_slack, f
    assert f["lag_p99_ms_max"] < 250, f  # under watchdog.warn_ms the whole time
    keys.assert_no_leaks(report.log_paths)


def test_fifteen_seconds_of_steady_load(tmp_path: Path, llm: FakeOpenAI) -> None:
    report = run_soak(tmp_path, llm, seconds=15, rate=15, warmup=5, every=0.5)
    record("soak_short", report.figures)
    check(report, fd_slack=3, thread_slack=2)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_ten_minutes_of_steady_load(tmp_path: Path, llm: FakeOpenAI) -> None:
    seconds = env_number("HERMES_SOAK_SECONDS", 600)
    rate = env_number("HERMES_SOAK_RATE", 20)
    report = run_soak(tmp_path, llm, seconds=seconds, rate=rate, warmup=min(120, seconds / 4))
    record("soak", report.figures)
    check(report, fd_slack=3, thread_slack=2)
