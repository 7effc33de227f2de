"""Redis stopped (and started again empty) and Redis frozen (SIGSTOP), each for longer than a
lease, while real `hermes gateway run` instances on one PostgreSQL take numbered Slack messages
from many sessions: nothing lost, nothing answered twice, no session's model calls overlapping,
every instance ready again soon after Redis is back, and users whose message waited told so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.cluster import ClusterSetup
from tests.chaos.cluster_redis import (
    Outage,
    OutageReport,
    own_redis_and_postgres,
    run_redis_outages,
)
from tests.chaos.kit import record
from tests.fakes.openai import FakeOpenAI
from tests.security import keys

pytestmark = [pytest.mark.e2e]
READY_WITHIN_S = 30.0  # after Redis is back, every instance says ready within this


def check(report: OutageReport, tmp: Path) -> dict[str, object]:
    f = report.chaos.figures
    figures = {
        **f,
        "outages": [o.figures() for o in report.outages],
        "told": {s: len(t) for s, t in report.told.items()},
    }
    (tmp / "figures.json").write_text(
        json.dumps(
            {
                **figures,
                "lost": report.chaos.lost,
                "unacked": report.chaos.unacked,
                "doubled": report.chaos.doubled,
                "overlaps": report.chaos.overlaps,
                "untold": report.untold,
                "exit_codes": report.chaos.exit_codes,
            },
            indent=1,
        )
    )
    print(figures)
    assert f["never_answered"] == 0, (f, report.chaos.lost[:20])
    assert f["never_acked"] == 0, (f, report.chaos.unacked[:20])
    assert f["answered_twice"] == 0, (f, report.chaos.doubled)  # no kill excuses a double here
    assert f["concurrent_runs"] == 0, (f, report.chaos.overlaps[:20])
    assert f["misrouted"] == 0, f
    assert not report.died, report.died
    for outage in report.outages:
        assert outage.not_ready, outage.figures()  # /readyz said why meanwhile
        assert len(outage.ready_again_s) == f["instances"], outage.figures()
        assert max(outage.ready_again_s.values()) <= READY_WITHIN_S, outage.figures()
        assert outage.waited, outage.figures()  # messages did wait, and were answered after
    assert not report.untold, (report.untold, report.told)
    codes = report.chaos.exit_codes
    assert codes and all(code == 0 for code in codes), codes
    keys.assert_no_leaks(report.chaos.log_paths)
    return figures


@pytest.mark.timeout(600)
def test_redis_stopped_then_frozen_under_load_loses_nothing(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    """The default-suite variant: 2 instances, 20 sessions, `lease_s: 3`; Redis stopped for
    9 s (three leases) and started again empty, then frozen for 9 s; the waiting notice's
    threshold shortened to 3 s through `cluster.waiting_notice_s`."""
    outages = [Outage("stop", 9.0), Outage("freeze", 9.0)]
    with own_redis_and_postgres(tmp_path) as (store_url, redis):
        setup = ClusterSetup(store_url, redis.url, lease_s=3)
        report = run_redis_outages(
            tmp_path,
            llm,
            setup,
            redis,
            outages,
            waiting_notice_s=3,
            traffic_s=3.0,
            model_delay=(0.3, 1.5),  # runs in flight when a lease runs out in the outage
        )
    check(report, tmp_path)
    assert report.told  # the outages outlasted the threshold: users were told


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_long_redis_outages_under_load_lose_nothing(tmp_path: Path, llm: FakeOpenAI) -> None:
    """3 instances, 60 sessions, `lease_s: 3`, the default 30 s waiting notice: Redis stopped
    for 36 s and started again empty, then frozen for 36 s."""
    outages = [Outage("stop", 36.0), Outage("freeze", 36.0)]
    with own_redis_and_postgres(tmp_path) as (store_url, redis):
        setup = ClusterSetup(store_url, redis.url, lease_s=3)
        report = run_redis_outages(
            tmp_path, llm, setup, redis, outages, instances=3, sessions=60, waiting_notice_s=30
        )
    figures = check(report, tmp_path)
    record("cluster_redis_outages", figures)
    assert report.told
