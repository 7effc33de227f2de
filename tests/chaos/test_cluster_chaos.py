"""Cluster chaos against real processes: three `hermes gateway run` instances on one PostgreSQL
and one Redis, Slack HTTP events spread over them, one instance SIGKILLed every few seconds and
started again. Nothing may be lost, no session may run on two instances at once, a doubled
answer only where an instance died between Slack taking its reply and recording it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.cluster import ClusterSetup, redis_and_postgres
from tests.chaos.cluster_run import ClusterReport, run_cluster_chaos
from tests.chaos.kit import env_number, record
from tests.fakes.openai import FakeOpenAI
from tests.security import keys

pytestmark = [pytest.mark.e2e]


def check(report: ClusterReport, tmp: Path) -> None:
    f = report.figures
    (tmp / "figures.json").write_text(
        json.dumps(
            {
                **f,
                "lost": report.lost,
                "unacked": report.unacked,
                "doubled": report.doubled,
                "unexplained": report.unexplained_doubles,
                "overlaps": report.overlaps,
                "exit_codes": report.exit_codes,
            },
            indent=1,
        )
    )
    assert f["never_answered"] == 0, (f, report.lost[:20])
    assert f["never_acked"] == 0, (f, report.unacked[:20])
    assert f["concurrent_runs"] == 0, (f, report.overlaps[:20])
    assert f["misrouted"] == 0, f
    assert not report.unexplained_doubles, (f, report.unexplained_doubles)
    assert report.exit_codes and all(code == 0 for code in report.exit_codes), report.exit_codes
    keys.assert_no_leaks(report.log_paths)


@pytest.mark.timeout(600)
def test_a_few_kills_in_a_cluster_lose_nothing(tmp_path: Path, llm: FakeOpenAI) -> None:
    """The default-suite variant: 20 sessions, 3 kills (about a minute on 2 busy cores)."""
    with redis_and_postgres(tmp_path) as (store_url, redis_url):
        setup = ClusterSetup(store_url, redis_url, lease_s=3)
        report = run_cluster_chaos(
            tmp_path, llm, setup, sessions=20, kills=3, gap=(1.5, 3.0), seed=3
        )
    print(report.figures)
    check(report, tmp_path)
    assert report.figures["kills"] == 3 and report.figures["sent"] >= 20


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_many_kills_in_a_cluster_lose_nothing(tmp_path: Path, llm: FakeOpenAI) -> None:
    kills = int(env_number("HERMES_CHAOS_ROUNDS", 30))
    seed = int(env_number("HERMES_CHAOS_SEED", 1))
    with redis_and_postgres(tmp_path) as (store_url, redis_url):
        setup = ClusterSetup(store_url, redis_url, lease_s=3)
        report = run_cluster_chaos(tmp_path, llm, setup, sessions=100, kills=kills, seed=seed)
    record("cluster_chaos", report.figures)
    print(report.figures)
    check(report, tmp_path)
    assert report.figures["kills"] >= 30
