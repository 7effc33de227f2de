"""How a cluster scales and fails over: real `hermes gateway run` processes on one PostgreSQL
database and one Redis, Slack HTTP events from 300 sessions spread over the instances, a fake
model answering in 200 ms. Throughput on 1, 2 and 3 instances (pool-bound: `runner.workers` per
instance), as ratios to one instance measured in the same run; then, on 3 instances, the time
from a SIGKILL until each waiting session of the killed instance is answered elsewhere, with
fewer sessions (`--failover-sessions`), so the time is the takeover's, not the pool's queue.

    HERMES_TEST_POSTGRES='hermes@/?host=/tmp/pg' \\
        unshare -rn sh -c 'ip link set lo up && exec python -m bench.cluster_scale'

Each phase has a database, a Redis, a fake Slack and a fake model of its own, so nothing one
phase left unanswered is answered in the next. A phase ends by letting every message sent be
answered (`lost` counts those acked and never answered). The pool is the bottleneck when the
model's most requests in flight equal workers x instances and the rate is near that over the
model's 200 ms; everything shares this machine, so keep `--workers` low on a small one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.chaos.cluster import (
    ChaosSlack,
    Cluster,
    ClusterSetup,
    Traffic,
    redis_and_postgres,
    session_of,
)
from tests.chaos.cluster_run import Kill, Owners, _kill_one, _report, chatting
from tests.chaos.kit import ChaosModel, tokens_in
from tests.fakes.openai import FakeOpenAI
from tests.security import keys

MODEL_S = 0.2
TINY: dict[str, Any] = {"sessions": 20, "workers": 1, "seconds": 3.0, "warmup": 2.0}
TINY.update(kills=1, gap=2.0, sizes=[1, 2], failover_sessions=10)


def phase(tmp: Path, n: int, args: Any, kills: int = 0) -> dict[str, Any]:
    """One run on ``n`` instances: answers per second over the window after the warmup, or
    with ``kills`` the takeover times; then the tally once every message is answered."""
    with (
        FakeOpenAI(api_key=keys.MODEL_KEY, keep=1000) as llm,
        redis_and_postgres(tmp) as (store_url, redis_url),
    ):
        llm.responder = ChaosModel(tool_share=0.0, delay=(MODEL_S, MODEL_S))
        llm.session_of = session_of
        setup = ClusterSetup(store_url, redis_url, args.lease, args.workers, args.log_level)
        slack = ChaosSlack().start()
        cluster = Cluster(tmp, setup, llm, slack, n)
        pause = (0.0, 0.5) if kills else (0.0, 0.0)
        sessions = args.failover_sessions if kills else args.sessions
        traffic = Traffic(cluster, sessions, pause=pause, seed=n + 100 * kills)
        owners, done = Owners(cluster), list[Kill]()
        with chatting(cluster, traffic, owners, llm, settle_s=args.settle) as codes:
            time.sleep(args.warmup)
            start = time.monotonic()
            for _ in range(kills):
                done.append(_kill_one(cluster, traffic, owners, random.Random(len(done)), (0.5, 1)))
                time.sleep(args.gap)
            time.sleep(0 if kills else args.seconds)
            end = time.monotonic()
        tally = _report(cluster, traffic, done, llm, codes)
        report = tally.figures
        report["max_in_flight"] = llm.max_in_flight
        # a double not explained by a kill right after its first copy: each copy's poster, time
        report["unexplained_doubles"] = {
            token: [(m.get("poster"), round(m["at"] - start, 2)) for m in _copies(slack, token)]
            for token in tally.unexplained_doubles
        }
    answered = sum(1 for at in traffic.answered.values() if start <= at < end)
    report["answers_per_s"] = round(answered / (end - start), 1)
    report["pool_bound_per_s"] = round(n * args.workers / MODEL_S, 1)
    report["exit_codes"] = codes
    return report


def _copies(slack: ChaosSlack, token: str) -> list[dict[str, Any]]:
    return [m for m in slack.posted if token in tokens_in(m)]


def run(args: Any) -> dict[str, Any]:
    phases: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        if args.workdir is not None:  # kept, with each instance's log, for a look afterwards
            tmp = str(Path(tempfile.mkdtemp(dir=args.workdir)))
        for n in args.sizes:
            phases[f"x{n}"] = figures = phase(Path(tmp) / f"x{n}", n, args)
            print(
                f"{n} instance(s): {figures['answers_per_s']} answers/s "
                f"(pool-bound {figures['pool_bound_per_s']}), model in flight at most "
                f"{figures['max_in_flight']} of {n * args.workers}, "
                f"lost {figures['never_answered']}, answered twice {figures['answered_twice']} "
                f"{figures['unexplained_doubles'] or ''}, loadavg {_load()}",
                flush=True,
            )
        size = max(args.sizes)
        phases["failover"] = takeover = phase(Path(tmp) / "failover", size, args, args.kills)
        print(
            f"failover on {size}: p50 {takeover['takeover_p50_s']} s, max "
            f"{takeover['takeover_max_s']} s over {takeover['takeover_measured']}, lost "
            f"{takeover['never_answered']}, answered twice {takeover['answered_twice']} "
            f"{takeover['unexplained_doubles'] or ''}, loadavg {_load()}",
            flush=True,
        )
    one = phases[f"x{args.sizes[0]}"]["answers_per_s"]
    return {
        "sessions": args.sessions,
        "workers_per_instance": args.workers,
        "model_s": MODEL_S,
        "lease_s": args.lease,
        "answers_per_s": {n: phases[f"x{n}"]["answers_per_s"] for n in args.sizes},
        "max_in_flight": {n: phases[f"x{n}"]["max_in_flight"] for n in args.sizes},
        # None: the first size answered nothing in its window (overloaded, or stuck)
        "scaling": {
            n: round(phases[f"x{n}"]["answers_per_s"] / one, 2) if one else None
            for n in args.sizes[1:]
        },
        "failover_sessions": args.failover_sessions,
        "failover_measured": phases["failover"]["takeover_measured"],
        "failover_p50_s": phases["failover"]["takeover_p50_s"],
        "failover_max_s": phases["failover"]["takeover_max_s"],
        "lost": sum(p["never_answered"] for p in phases.values()),
        "answered_twice": sum(p["answered_twice"] for p in phases.values()),
        "unexplained_doubles": sum(len(p["unexplained_doubles"]) for p in phases.values()),
        "concurrent_runs": sum(p["concurrent_runs"] for p in phases.values()),
        "loadavg": _load(),
        "phases": phases,
    }


def _load() -> str:
    return (
        " ".join(Path("/proc/loadavg").read_text().split()[:3])
        if os.path.exists("/proc/loadavg")
        else "?"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_scale", description=__doc__)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2, help="runner.workers per instance")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=20.0, help="before the window, kills")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--gap", type=float, default=5.0, help="seconds between kills")
    # below the pool's capacity: a saturated pool would add its queue to every takeover
    parser.add_argument("--failover-sessions", type=int, default=30)
    parser.add_argument("--log-level", default="warning", help="the instances' logging.level")
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--settle", type=float, default=120.0, help="at most, for the answers")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 3], help="instances")
    parser.add_argument("--tiny", action="store_true", help="a smoke run (figures mean nothing)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the logs under it")
    args = parser.parse_args(argv)
    if args.tiny:
        vars(args).update(TINY)
    figures = run(args)
    print(json.dumps({k: v for k, v in figures.items() if k != "phases"}, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
