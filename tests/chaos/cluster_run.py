"""Cluster chaos: numbered Slack messages from many sessions into three instances while one of
them is SIGKILLed every few seconds and started again; then the tally. Nothing may be lost,
no session may run twice at once (the fake model's per-session in-flight log), and a doubled
answer must have had its first copy posted by an instance killed right after posting it."""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from tests.chaos.cluster import ChaosSlack, Cluster, ClusterSetup, Node, Traffic, session_of
from tests.chaos.kit import ChaosModel, percentile, tokens_in
from tests.fakes.openai import FakeOpenAI

CHANNEL_RE = re.compile(r"D(\d{4})")
WINDOW_S = 0.5  # a post this long before its poster's kill: its "answered" mark may be lost


@dataclass
class Kill:
    at: float
    instance: str
    waiting: dict[int, str]  # session: its unanswered token, for sessions the victim owned


@dataclass
class ClusterReport:
    figures: dict[str, Any]
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    unexplained_doubles: list[str] = field(default_factory=list)
    overlaps: list[tuple[str, float]] = field(default_factory=list)
    exit_codes: list[int] = field(default_factory=list)
    log_paths: list[Path] = field(default_factory=list)
    unacked: list[tuple[str, list[str]]] = field(default_factory=list)


class Owners:
    """Who owns which session, from each ready instance's `/status`, polled in a thread."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.of: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.25):
            for node in list(self.cluster.nodes):
                self._poll(node)

    def _poll(self, node: Node) -> None:
        if not node.ready or node.proc is None:
            return
        try:
            owned = httpx.get(
                f"{node.proc.url}/status", headers=node.proc.operator, timeout=2
            ).json()["cluster"]["owned"]
        except (httpx.HTTPError, ValueError, KeyError):
            return
        for key in owned:
            if found := CHANNEL_RE.search(key):
                self.of[int(found.group(1))] = node.instance_id


def run_cluster_chaos(
    tmp: Path,
    llm: FakeOpenAI,
    setup: ClusterSetup,
    *,
    sessions: int,
    kills: int,
    gap: tuple[float, float] = (2.0, 5.0),
    down: tuple[float, float] = (0.2, 1.5),
    seed: int = 1,
) -> ClusterReport:
    rng = random.Random(seed)
    llm.responder = ChaosModel(tool_share=0.0, delay=(0.1, 0.6), seed=seed)
    llm.session_of = session_of
    cluster = Cluster(tmp, setup, llm, ChaosSlack().start(), 3)
    traffic = Traffic(cluster, sessions, seed=seed)
    owners = Owners(cluster)
    done: list[Kill] = []
    with chatting(cluster, traffic, owners, llm) as codes:
        for _ in range(kills):
            time.sleep(rng.uniform(*gap))
            done.append(_kill_one(cluster, traffic, owners, rng, down))
        time.sleep(2.0)
    return _report(cluster, traffic, done, llm, codes)


class Watcher(Protocol):
    """A thread that looks at the instances while they chat (`Owners`, `Readiness`)."""

    thread: threading.Thread
    stop: threading.Event


@contextmanager
def chatting(
    cluster: Cluster, traffic: Traffic, watcher: Watcher, llm: FakeOpenAI, settle_s: float = 90
) -> Iterator[list[int]]:
    """Every instance started and ready, ``watcher`` and the traffic running. A block that
    ends normally then stops the traffic, waits up to ``settle_s`` for what is owed, and stops
    the instances: their exit codes fill the list it was given. Either way, at the end every
    instance is killed, the fake Slack stopped and the model's script reset."""
    codes: list[int] = []
    try:
        cluster.users[:] = [traffic.user(i) for i in range(1, traffic.sessions + 1)]
        for node in cluster.nodes:
            cluster.start(node, wait=False)
        for node in cluster.nodes:
            cluster.wait_ready(node)
        watcher.thread.start()
        driver = traffic.start()
        yield codes
        cluster.stopping = True
        traffic.stopping.set()
        driver.join(60)  # the deliveries still being retried end
        _settle(traffic, timeout=settle_s)
        traffic.closing.set()
        codes += cluster.stop_all()  # one still starting is stopped too (exit 0, promptly)
    finally:
        cluster.stopping = True
        watcher.stop.set()
        traffic.stopping.set()
        traffic.closing.set()
        cluster.kill_all()
        cluster.slack.stop()
        llm.responder = None
        llm.session_of = None


def _kill_one(
    cluster: Cluster,
    traffic: Traffic,
    owners: Owners,
    rng: random.Random,
    down: tuple[float, float],
) -> Kill:
    """SIGKILL a ready instance (never the last ready one), start it again a moment later."""
    while sum(n.ready for n in cluster.nodes) < 2:
        time.sleep(0.1)
    node = rng.choice([n for n in cluster.nodes if n.ready])
    victim = node.instance_id
    cluster.kill(node)
    at = time.monotonic()
    unanswered = {s.session: s.token for s in traffic.unanswered()}
    waiting = {s: t for s, t in unanswered.items() if owners.of.get(s) == victim}
    time.sleep(rng.uniform(*down))
    cluster.start(node, wait=False)
    threading.Thread(target=_revive, args=(cluster, node), daemon=True).start()
    return Kill(at, victim, waiting)


def _revive(cluster: Cluster, node: Node) -> None:
    """Mark the restarted instance ready once it is; it may be stopped first (the run ends)."""
    try:
        cluster.wait_ready(node)
    except AssertionError:
        if not cluster.stopping:
            raise


def _settle(traffic: Traffic, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while traffic.unanswered() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # a late second copy would show now


def _report(
    cluster: Cluster, traffic: Traffic, kills: list[Kill], llm: FakeOpenAI, codes: list[int]
) -> ClusterReport:
    posts = list(cluster.slack.posted)
    copies: Counter[str] = Counter(t for m in posts for t in tokens_in(m))
    sent = {s.token for s in traffic.sent}
    lost = [s.token for s in traffic.sent if copies[s.token] == 0 and s.acked]
    unacked = [(s.token, s.statuses) for s in traffic.sent if not s.acked]
    doubled = [t for t in sent if copies[t] > 1]
    unexplained = [t for t in doubled if not _in_kill_window(t, posts, kills)]
    misrouted = sum(
        1
        for m in posts
        for t in tokens_in(m)
        if f"D{int(t[2:].split('-')[0]):04d}" != m.get("channel")
    )
    takeover = [
        traffic.answered[token] - k.at
        for k in kills
        for token in k.waiting.values()
        if token in traffic.answered
    ]
    figures = {
        "instances": len(cluster.nodes),
        "sessions": traffic.sessions,
        "kills": len(kills),
        "sent": len(traffic.sent),
        "answered_once": sum(1 for t in sent if copies[t] == 1),
        "answered_twice": len(doubled),
        "never_answered": len(lost),
        "misrouted": misrouted,
        "concurrent_runs": len(llm.overlaps),
        "model_requests": len(llm.requests),
        "redelivered_by_slack": sum(1 for s in traffic.sent if s.attempts > 1),
        "never_acked": len(unacked),  # no instance took it (at the end only): not in the tally
        "takeover_measured": len(takeover),
        "takeover_p50_s": round(percentile(takeover, 0.5), 2),
        "takeover_max_s": round(max(takeover, default=0.0), 2),
        "lease_s": cluster.setup.lease_s,
    }
    report = ClusterReport(
        figures, lost, doubled, unexplained, list(llm.overlaps), codes, cluster.log_paths()
    )
    report.unacked = unacked
    return report


def _in_kill_window(token: str, posts: list[dict[str, Any]], kills: list[Kill]) -> bool:
    """The first copy was posted by an instance SIGKILLed within WINDOW_S after posting it:
    between Slack taking the reply and the "answered" commit (not closed on Slack yet)."""
    first = next(m for m in posts if token in tokens_in(m))
    return any(
        k.instance == first.get("poster") and -0.05 <= k.at - first["at"] < WINDOW_S for k in kills
    )
