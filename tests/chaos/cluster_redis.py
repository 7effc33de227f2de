"""Redis taken away under load: the chaos cluster (real `hermes gateway run` instances on one
PostgreSQL and a Redis of the test's own, Slack HTTP events, the fake model) while Redis is
stopped (and started again empty) or frozen (SIGSTOP, then SIGCONT) for longer than a lease,
with the traffic running before, during and after; then the tally of `cluster_run`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.chaos.cluster import (
    ChaosSlack,
    Cluster,
    ClusterSetup,
    Node,
    Traffic,
    postgres_database,
    session_of,
)
from tests.chaos.cluster_run import CHANNEL_RE, ClusterReport, _report, chatting
from tests.chaos.kit import ChaosModel, percentile
from tests.fakes.openai import FakeOpenAI
from tests.redis_server import RedisProcess

WAITING_TEXT = "so your message waits"  # a fragment of `ownership.WAITING`


@dataclass
class Outage:
    kind: str  # "stop": killed, started again empty; "freeze": SIGSTOP, then SIGCONT
    length_s: float
    began: float = 0.0
    back: float = 0.0  # Redis started again or continued
    not_ready: set[str] = field(default_factory=set)  # instances whose /readyz said 503 meanwhile
    ready_again_s: dict[str, float] = field(default_factory=dict)  # from `back` to /readyz 200
    waited: dict[str, float] = field(default_factory=dict)  # token sent meanwhile: answer delay

    def figures(self) -> dict[str, Any]:
        delays = list(self.waited.values())
        return {
            "kind": self.kind,
            "length_s": self.length_s,
            "not_ready_seen": sorted(self.not_ready),
            "ready_again_max_s": round(max(self.ready_again_s.values(), default=-1.0), 2),
            "waited": len(delays),
            "answer_after_back_p50_s": round(percentile(delays, 0.5), 2),
            "answer_after_back_max_s": round(max(delays, default=0.0), 2),
        }


@dataclass
class OutageReport:
    chaos: ClusterReport
    outages: list[Outage]
    told: dict[int, list[float]]  # session: when its user was told the message waits
    untold: list[str]  # tokens that waited past the notice threshold with nobody told
    died: list[str]  # instances whose process had exited before the run's end


class Readiness:
    """Polls each instance's `/readyz` in a thread: (monotonic time, instance, ready)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.samples: list[tuple[float, str, bool]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.25):
            for node in self.cluster.nodes:
                if node.proc is None:
                    continue
                try:
                    ready = httpx.get(f"{node.proc.url}/readyz", timeout=2).status_code == 200
                except httpx.HTTPError:
                    continue
                self.samples.append((time.monotonic(), node.instance_id, ready))

    def ready_at(self, instance: str, after: float) -> float | None:
        """When ``instance`` first said ready at or after ``after`` (None: not yet)."""
        return next((t for t, i, ok in self.samples if i == instance and ok and t >= after), None)


class OutageCluster(Cluster):
    """The chaos cluster with `cluster.waiting_notice_s` set (the notice's threshold)."""

    def __init__(self, *args: Any, waiting_notice_s: float | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.waiting_notice_s = waiting_notice_s

    def config(self, node: Node) -> dict[str, Any]:
        data = super().config(node)
        if self.waiting_notice_s is not None:
            data["cluster"]["waiting_notice_s"] = self.waiting_notice_s
        return data


@contextmanager
def own_redis_and_postgres(tmp: Path) -> Iterator[tuple[str, RedisProcess]]:
    """(store URL, the Redis server): the test stops, starts and freezes that server."""
    redis = RedisProcess(tmp / "redis")
    redis.directory.mkdir(parents=True, exist_ok=True)
    with postgres_database() as store_url:
        redis.start()
        try:
            yield store_url, redis
        finally:
            redis.stop()  # SIGKILL ends a frozen server too


def run_redis_outages(
    tmp: Path,
    llm: FakeOpenAI,
    setup: ClusterSetup,
    redis: RedisProcess,
    outages: list[Outage],
    *,
    instances: int = 2,
    sessions: int = 20,
    waiting_notice_s: float | None = None,
    traffic_s: float = 4.0,  # of traffic before the first outage and after each
    ready_within_s: float = 60.0,
    model_delay: tuple[float, float] = (0.1, 0.6),
    seed: int = 5,
) -> OutageReport:
    llm.responder = ChaosModel(tool_share=0.0, delay=model_delay, seed=seed)
    llm.session_of = session_of
    slack = ChaosSlack().start()
    cluster = OutageCluster(tmp, setup, llm, slack, instances, waiting_notice_s=waiting_notice_s)
    traffic = Traffic(cluster, sessions, seed=seed)
    readiness = Readiness(cluster)
    with chatting(cluster, traffic, readiness, llm) as codes:
        for outage in outages:
            time.sleep(traffic_s)
            _outage(cluster, redis, readiness, outage, ready_within_s)
        time.sleep(traffic_s)
        died = [n.instance_id for n in cluster.nodes if n.proc and n.proc.proc.poll() is not None]
    chaos = _report(cluster, traffic, [], llm, codes)
    told = _told(slack)
    for outage in outages:
        outage.waited = {
            s.token: traffic.answered[s.token] - outage.back
            for s in traffic.sent
            if outage.began <= s.at < outage.back and traffic.answered.get(s.token, 0) > outage.back
        }
    untold = _untold(traffic, outages, told, waiting_notice_s)
    return OutageReport(chaos, outages, told, untold, died)


def _outage(
    cluster: Cluster, redis: RedisProcess, readiness: Readiness, outage: Outage, within: float
) -> None:
    """Take Redis away for ``outage.length_s``, bring it back, wait for every instance to say
    ready again (at most ``within`` seconds)."""
    outage.began = time.monotonic()
    if outage.kind == "stop":
        redis.stop()
    else:
        redis.freeze(True)
    time.sleep(outage.length_s)
    if outage.kind == "stop":
        redis.start()  # empty: no persistence
    else:
        redis.freeze(False)
    outage.back = time.monotonic()
    outage.not_ready = {
        i for t, i, ok in readiness.samples if not ok and outage.began <= t <= outage.back
    }
    deadline = outage.back + within
    while time.monotonic() < deadline:
        for node in cluster.nodes:
            at = readiness.ready_at(node.instance_id, outage.back)
            if at is not None:
                outage.ready_again_s.setdefault(node.instance_id, at - outage.back)
        if len(outage.ready_again_s) == len(cluster.nodes):
            return
        time.sleep(0.1)


def _told(slack: ChaosSlack) -> dict[int, list[float]]:
    told: dict[int, list[float]] = {}
    for msg in slack.posted:
        found = CHANNEL_RE.search(str(msg.get("channel")))
        if found and WAITING_TEXT in str(msg.get("text")):
            told.setdefault(int(found.group(1)), []).append(msg["at"])
    return told


def _untold(
    traffic: Traffic,
    outages: list[Outage],
    told: dict[int, list[float]],
    threshold: float | None,
) -> list[str]:
    """Messages sent during an outage that were still unanswered well past the notice's
    threshold before Redis was back (2 s of room for the loaded machine), whose user was
    not told between sending it and its answer."""
    if threshold is None:
        return []
    untold = []
    for outage in outages:
        for s in traffic.sent:
            answered = traffic.answered.get(s.token, float("inf"))
            if not (outage.began <= s.at < outage.back - threshold - 2.0) or answered < outage.back:
                continue
            if not any(s.at <= t <= answered for t in told.get(s.session, [])):
                untold.append(s.token)
    return untold
