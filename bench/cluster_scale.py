"""How a cluster scales and fails over: real `hermes gateway run` processes on one PostgreSQL
database and one Redis, Slack HTTP events from 300 sessions spread over the instances, a fake
model answering in 200 ms. Throughput on 1, 2 and 3 instances (pool-bound: `runner.workers` per
instance), as ratios to one instance measured in the same run; then, on 3 instances, the time
from a SIGKILL until each waiting session of the killed instance is answered elsewhere.

    HERMES_TEST_POSTGRES='hermes@/?host=/tmp/pg' \\
        unshare -rn sh -c 'ip link set lo up && exec python -m bench.cluster_scale'

Everything (fakes, driver, instances) shares this machine: on a small one the ratios show the
CPU as much as the coordination.
"""

from __future__ import annotations

import argparse
import json
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
from tests.chaos.cluster_run import Owners, _kill_one
from tests.chaos.kit import ChaosModel, percentile
from tests.fakes.openai import FakeOpenAI
from tests.security import keys


def throughput(tmp: Path, setup: ClusterSetup, llm: FakeOpenAI, n: int, args: Any) -> float:
    """Answers per second over the measured window, ``n`` instances, every session busy."""
    slack = ChaosSlack().start()
    cluster = Cluster(tmp / f"scale{n}", setup, llm, slack, n)
    traffic = Traffic(cluster, args.sessions, pause=(0.0, 0.0), seed=n)
    cluster.users[:] = [traffic.user(i) for i in range(1, args.sessions + 1)]
    try:
        for node in cluster.nodes:
            cluster.start(node, wait=False)
        for node in cluster.nodes:
            cluster.wait_ready(node)
        driver = traffic.start()
        time.sleep(args.warmup)
        start = time.monotonic()
        time.sleep(args.seconds)
        end = time.monotonic()
        traffic.scan()
        traffic.stopping.set()
        driver.join(30)
        cluster.stop_all()
    finally:
        traffic.stopping.set()
        cluster.kill_all()
        slack.stop()
    return sum(1 for at in traffic.answered.values() if start <= at < end) / (end - start)


def failover(tmp: Path, setup: ClusterSetup, llm: FakeOpenAI, args: Any) -> list[float]:
    """Seconds from each SIGKILL to the answer of each session the victim had waiting."""
    slack = ChaosSlack().start()
    cluster = Cluster(tmp / "failover", setup, llm, slack, 3)
    traffic = Traffic(cluster, args.sessions, pause=(0.0, 0.5), seed=99)
    cluster.users[:] = [traffic.user(i) for i in range(1, args.sessions + 1)]
    owners = Owners(cluster)
    rng = random.Random(5)
    kills = []
    try:
        for node in cluster.nodes:
            cluster.start(node, wait=False)
        for node in cluster.nodes:
            cluster.wait_ready(node)
        owners.thread.start()
        driver = traffic.start()
        for _ in range(args.kills):
            time.sleep(args.warmup)
            kills.append(_kill_one(cluster, traffic, owners, rng, (0.5, 1.0)))
        time.sleep(setup.lease_s * 4)
        traffic.scan()
        traffic.stopping.set()
        driver.join(30)
    finally:
        owners.stop.set()
        traffic.stopping.set()
        cluster.kill_all()
        slack.stop()
    return [
        traffic.answered[t] - k.at
        for k in kills
        for t in k.waiting.values()
        if t in traffic.answered
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4, help="runner.workers per instance")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with (
        FakeOpenAI(api_key=keys.MODEL_KEY, keep=1000) as llm,
        tempfile.TemporaryDirectory() as tmp,
        redis_and_postgres(Path(tmp)) as (store_url, redis_url),
    ):
        llm.responder = ChaosModel(tool_share=0.0, delay=(0.2, 0.2))
        llm.session_of = session_of
        setup = ClusterSetup(store_url, redis_url, args.lease, args.workers, "warning")
        rates = {}
        for n in (1, 2, 3):
            rates[n] = throughput(Path(tmp), setup, llm, n, args)
            print(f"{n} instance(s): {rates[n]:.1f} answers/s", flush=True)
        takeover = failover(Path(tmp), setup, llm, args)
    figures = {
        "sessions": args.sessions,
        "workers_per_instance": args.workers,
        "model_s": 0.2,
        "answers_per_s": {n: round(r, 1) for n, r in rates.items()},
        # None: one instance answered nothing in the window (overloaded, or stuck)
        "scaling_2": round(rates[2] / rates[1], 2) if rates[1] else None,
        "scaling_3": round(rates[3] / rates[1], 2) if rates[1] else None,
        "lease_s": args.lease,
        "failover_measured": len(takeover),
        "failover_p50_s": round(percentile(takeover, 0.5), 2),
        "failover_max_s": round(max(takeover, default=0.0), 2),
        "concurrent_runs": len(llm.overlaps),
    }
    print(json.dumps(figures, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
