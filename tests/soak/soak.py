"""Soak: `hermes gateway run` under a steady load through the fake Telegram for a while, with
the daemon's RSS, open file descriptors, threads (psutil) and loop lag (`/status`) sampled.

The load: numbered messages from many chats at a fixed rate, some turns calling a tool; each
chat starts a new conversation (`/new`) every few turns, as people do, so what is measured is
the gateway's own footprint, not the growth of one long conversation (the context budget's
business)."""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.chaos.crash import gateway_config
from tests.chaos.kit import ChaosModel, ChaosTelegram, Driver, inbox_count, percentile, tally
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.security import keys


@dataclass
class Sample:
    t: float
    rss_mb: float
    fds: int
    threads: int
    lag_ms: float
    lag_p99_ms: float
    sessions: int
    cached_agents: int


@dataclass
class SoakReport:
    samples: list[Sample]
    figures: dict[str, Any]
    exit_code: int | None
    log_paths: list[Path] = field(default_factory=list)


class ResettingDriver(Driver):
    """`Driver` whose chats send ``/new`` every ``turns`` messages."""

    def __init__(self, *args: Any, turns: int = 15, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.turns = turns

    def _send(self, chat: int) -> None:
        if self._counters[chat] and self._counters[chat] % self.turns == 0:
            self.tg.send_text(chat, "/new")
        super()._send(chat)


class Sampler:
    """Samples the daemon every ``every`` seconds in a thread."""

    def __init__(self, gw: GatewayProcess, every: float) -> None:
        assert gw.proc is not None
        self.gw, self.every = gw, every
        self.proc = psutil.Process(gw.proc.pid)
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {keys.CONTROL_TOKEN}"}
        while not self._stop.wait(self.every):
            try:
                status = httpx.get(f"{self.gw.url}/status", headers=headers, timeout=5).json()
                with self.proc.oneshot():
                    rss, fds, threads = (
                        self.proc.memory_info().rss,
                        self.proc.num_fds(),
                        self.proc.num_threads(),
                    )
            except (httpx.HTTPError, psutil.Error):
                continue
            lag = status["loop_lag_ms"]
            self.samples.append(
                Sample(
                    t=round(time.monotonic() - self._started, 2),
                    rss_mb=round(rss / 2**20, 2),
                    fds=fds,
                    threads=threads,
                    lag_ms=lag["last"] or 0.0,
                    lag_p99_ms=lag["p99"] or 0.0,
                    sessions=status["sessions"]["active"],
                    cached_agents=status["sessions"]["cached_agents"],
                )
            )

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join(10)
        return self.samples


def run_soak(
    tmp: Path,
    llm: FakeOpenAI,
    *,
    seconds: float,
    rate: float,
    chats: int = 40,
    warmup: float | None = None,
    every: float = 1.0,
    seed: int = 5,
) -> SoakReport:
    home = tmp / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "workspace" / "notes.txt").write_text("a note\n" * 50)
    llm.responder = ChaosModel(tool_share=0.3, delay=(0.005, 0.03), tool_path="notes.txt")
    tg = ChaosTelegram().start()
    chat_ids = [2001 + i for i in range(chats)]
    gw = GatewayProcess(home, gateway_config(tg, llm, chat_ids))
    driver = ResettingDriver(tg, chat_ids, rate=rate, pause=(0.0, 0.0), seed=seed)
    exit_code = None
    try:
        gw.start()
        wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200, 30)
        sampler = Sampler(gw, every)
        driver.start()
        time.sleep(seconds)
        driver.stop()
        deadline = time.monotonic() + 30
        while driver.unanswered() and time.monotonic() < deadline:
            time.sleep(0.1)
        samples = sampler.stop()
        gw.signal(signal.SIGTERM)
        exit_code = gw.wait(20)
    finally:
        driver.stop()
        gw.kill()
        tg.stop()
        llm.responder = None
    result = tally(driver.sent, list(tg.sent))
    result.accepted = inbox_count(home)
    figures = {
        "seconds": seconds,
        "rate_per_s": rate,
        **result.figures(),
        "latency_p50_ms": round(percentile(driver.latencies, 0.5) * 1000, 1),
        "latency_p99_ms": round(percentile(driver.latencies, 0.99) * 1000, 1),
        **trend(samples, warmup if warmup is not None else seconds * 0.25),
    }
    return SoakReport(samples, figures, exit_code, keys.log_files(home))


def trend(samples: list[Sample], warmup: float) -> dict[str, Any]:
    """Start and end of each resource after warm-up (the mean of the first and last fifth)."""
    steady = [s for s in samples if s.t >= warmup]
    if len(steady) < 5:
        return {"samples": len(samples)}
    fifth = max(1, len(steady) // 5)
    head, tail = steady[:fifth], steady[-fifth:]

    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 2)

    rss0, rss1 = mean([s.rss_mb for s in head]), mean([s.rss_mb for s in tail])
    return {
        "samples": len(samples),
        "rss_start_mb": rss0,
        "rss_end_mb": rss1,
        "rss_growth_pct": round((rss1 - rss0) / rss0 * 100, 1),
        "rss_peak_mb": max(s.rss_mb for s in steady),
        "fds_start": mean([s.fds for s in head]),
        "fds_end": mean([s.fds for s in tail]),
        "fds_max": max(s.fds for s in steady),
        "threads_start": mean([s.threads for s in head]),
        "threads_end": mean([s.threads for s in tail]),
        "threads_max": max(s.threads for s in steady),
        "lag_p99_ms_max": max(s.lag_p99_ms for s in steady),
        "lag_last_ms_p99": round(percentile([s.lag_ms for s in steady], 0.99), 2),
        "cached_agents_end": tail[-1].cached_agents,
    }
