"""`python -m bench --only crowd`: many conversations at once on a slow streaming model.

The gateway runs its default pool (`runner.workers: auto`); the floor gets a pool as large as
the largest crowd, so both could hold every conversation at once. Each load is N new sessions
sending one message each, all at once, to a model that takes a fixed time: wall time ÷ that
time, the gateway's loop lag p99 (its own histogram) and `/healthz` p99 (probed every 50 ms
during the load), peak RSS (and its growth per run in flight), CPU per message, and every
message answered. Then the fairness case: one user floods from many group chats while others
send one message each, against the same others alone (docs/concurrency.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import lag
from bench.driver import Load, percentile
from bench.plan import Plan
from bench.procs import Child, start_fake
from bench.report import _commit, _machine
from bench.side import Side

LAG_INTERVAL_MS = 20
PROBE_S = 0.05  # /healthz and RSS while a load runs
FLOODER = 666_000  # the flooding user's Telegram id


@dataclass(frozen=True)
class CrowdPlan:
    loads: tuple[tuple[int, float], ...]  # (sessions at once, model seconds)
    reps: int  # runs of each load, per side
    fair_others: int  # users sending one message each
    fair_flood: int  # messages of the flooding user, each from its own group chat
    fair_delay_s: float  # the model's time in the fairness case
    fair_reps: int
    flood_wait_s: float  # how long a flood message's answer is waited for (most are refused)


CROWD_PLANS = {
    "full": CrowdPlan(((100, 0.2), (1000, 5.0)), 3, 50, 200, 1.0, 3, 15.0),
    "quick": CrowdPlan(((100, 0.2), (1000, 5.0)), 1, 50, 200, 1.0, 1, 15.0),
    "tiny": CrowdPlan(((10, 0.05), (30, 0.2)), 1, 5, 20, 0.2, 1, 5.0),
}


def _tune(config: dict[str, Any]) -> None:
    """The gateway with its default pool, answering in groups without a mention (the flood)."""
    config.pop("runner", None)
    config["platforms"]["telegram"]["require_mention"] = False


async def run(mode: str, workdir: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    plan, crowd = Plan.named(mode), CROWD_PLANS[mode]
    started = time.monotonic()
    biggest = max(n for n, _ in crowd.loads)
    children: list[Child] = []
    try:
        llm_child, llm = start_fake(workdir, "openai", "fake-openai")
        children.append(llm_child)
        urls = {}
        for kind in ("gateway", "floor"):
            child, urls[kind] = start_fake(workdir, "telegram", f"fake-telegram-{kind}")
            children.append(child)
        async with contextlib.AsyncExitStack() as stack:
            sides = [
                await stack.enter_async_context(
                    Side(
                        kind,
                        workdir,
                        urls[kind],
                        llm,
                        plan,
                        LAG_INTERVAL_MS,
                        tune=_tune,
                        floor_workers=biggest,
                    )
                )
                for kind in ("gateway", "floor")
            ]
            for side in sides:  # started, and warm: a first message loads what answering needs
                await side.start()
                [chat] = side.driver.new_chats(1)
                side.account("warm-up", await side.driver.sequential(chat, 1, side.deadline()))
            out: dict[str, Any] = {"mode": mode, "plan": asdict(crowd)}
            for n, delay in crowd.loads:
                for rep in range(crowd.reps):
                    for side in sides if rep % 2 == 0 else sides[::-1]:
                        progress(
                            f"[{time.monotonic() - started:6.1f}s] {side.kind:7} {n} x {delay:g} s"
                        )
                        figures = await crowd_load(side, n, delay)
                        out.setdefault(f"{n}x{delay:g}", {}).setdefault(side.kind, []).append(
                            figures
                        )
            progress(f"[{time.monotonic() - started:6.1f}s] gateway fairness")
            out["fairness"] = await fairness(sides[0], crowd)
        out["elapsed_s"] = round(time.monotonic() - started, 1)
        out["machine"] = _machine()
        out["commit"] = _commit()
        return out
    finally:
        for child in reversed(children):
            child.stop()


async def crowd_load(side: Side, n: int, delay: float) -> dict[str, Any]:
    """``n`` new sessions, one message each, all at once, on a model taking ``delay`` s."""
    inst = side.running()
    await side.llm_reset(delay)
    metrics = side.gateway_metrics_url()
    before = await _scrape(side, metrics)
    idle_rss = inst.rss_mb()
    cpu = inst.cpu_s()
    stop = threading.Event()
    watch = asyncio.create_task(asyncio.to_thread(_watch, inst, stop))
    try:
        load = await side.driver.sessions(side.driver.new_chats(n), 1, side.deadline())
    finally:
        stop.set()
        peak_rss, health = await watch
    cpu = inst.cpu_s() - cpu
    stats = await side.llm_stats()
    await side.llm_reset(0.0)
    side.account(f"crowd_{n}", load)
    after = await _scrape(side, metrics)
    lag_p99 = None
    if before is not None and after is not None:
        lag_p99 = lag.quantile(0.99, lag.diff(after, before))
    return {
        "wall_s": round(load.wall_s, 3),
        "wall_over_model": round(load.wall_s / delay, 3),
        "answered": load.answered,
        "lost": load.lost + load.unsent,
        "latency_p50_ms": round(percentile(load.latencies, 0.5) * 1000, 1),
        "latency_p99_ms": round(percentile(load.latencies, 0.99) * 1000, 1),
        "loop_lag_p99_ms": None if lag_p99 is None else round(lag_p99 * 1000, 2),
        "healthz_p99_ms": None if not health else round(percentile(health, 0.99) * 1000, 1),
        "healthz_probes": len(health),
        "rss_idle_mb": round(idle_rss, 1),
        "rss_peak_mb": round(peak_rss, 1),
        # per run in flight at the peak (the model's count): not all N may be at once
        "kb_per_run": round((peak_rss - idle_rss) * 1024 / max(1, stats["max_in_flight"]), 1),
        "cpu_per_msg_ms": round(cpu * 1000 / max(1, load.answered), 2),
        "model_max_in_flight": int(stats["max_in_flight"]),
        # the last model call began this long after the load did: the intake's share of the wall
        "last_call_started_s": stats.get("last_request_s"),
    }


def _watch(inst: Any, stop: threading.Event) -> tuple[float, list[float]]:
    """Peak RSS, and the latencies of `/healthz` (gateway only) until ``stop``: on a thread of
    its own with a blocking client, so what is timed is the gateway's answer, not the wait for
    the driver's event loop, which is busy with the N conversations."""
    peak, health = inst.rss_mb(), []
    url = urlsplit(inst.control_url) if inst.control_url is not None else None
    conn = None
    while not stop.is_set():
        if url is not None:
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
                conn.request("GET", "/healthz")
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                conn = None  # a new connection for the next probe; this one's time still counts
            health.append(time.perf_counter() - t0)
        peak = max(peak, inst.rss_mb())
        stop.wait(PROBE_S)
    if conn is not None:
        conn.close()
    return peak, health


async def _scrape(side: Side, url: str | None) -> lag.Buckets | None:
    if url is None:
        return None
    async with side.http.get(url) as resp:
        return lag.parse(await resp.text())


async def fairness(side: Side, crowd: CrowdPlan) -> dict[str, Any]:
    """The others' latencies alone and beside the flood, in alternating runs."""
    await side.llm_reset(crowd.fair_delay_s)
    alone: list[dict[str, float]] = []
    beside: list[dict[str, float]] = []
    flood_answered: list[int] = []
    try:
        for rep in range(crowd.fair_reps):
            for flooded in (False, True) if rep % 2 == 0 else (True, False):
                others = _others(side, crowd.fair_others)
                if not flooded:
                    alone.append(_summary(await others))
                    continue
                flood = _flood(side, crowd.fair_flood, crowd.flood_wait_s)
                load, answered = await asyncio.gather(others, flood)
                beside.append(_summary(load))
                flood_answered.append(answered)
    finally:
        await side.llm_reset(0.0)
    p50 = [b["p50_s"] / a["p50_s"] for a, b in zip(alone, beside, strict=True)]
    worst = [b["max_s"] / a["max_s"] for a, b in zip(alone, beside, strict=True)]
    return {
        "alone": alone,
        "beside_flood": beside,
        "flood_answered": flood_answered,
        "p50_ratio": round(statistics.median(p50), 3),
        "max_ratio": round(statistics.median(worst), 3),
    }


def _summary(load: Load) -> dict[str, float]:
    return {
        "p50_s": round(percentile(load.latencies, 0.5), 3),
        "max_s": round(max(load.latencies, default=0.0), 3),
        "answered": load.answered,
        "lost": load.lost,
    }


async def _others(side: Side, n: int) -> Load:
    load = await side.driver.sessions(side.driver.new_chats(n), 1, side.deadline())
    side.account("fairness", load)
    return load


async def _flood(side: Side, n: int, wait_s: float) -> int:
    """``n`` messages of one user, each in a group chat of its own (a session each); how many
    were answered within ``wait_s`` (the rest were refused, or wait past it)."""
    chats = [-c for c in side.driver.new_chats(n)]
    asks: list[Awaitable[float | None]] = [
        side.driver.ask(c, wait_s, chat_type="group", user_id=FLOODER) for c in chats
    ]
    return sum(1 for r in await asyncio.gather(*asks) if r is not None)


def markdown(data: dict[str, Any]) -> str:
    """The crowd's figures, one row per load and side (median over its runs)."""
    lines = [
        f"crowd bench ({data['mode']}), commit {data.get('commit')}, {data['elapsed_s']} s",
        "",
        "| load | side | wall ÷ model time | loop lag p99 (ms) | /healthz p99 (ms) | peak RSS (MB) "
        "| KB per run | CPU per msg (ms) | model calls at once | lost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, sides in data.items():
        if not isinstance(sides, dict) or "gateway" not in sides:
            continue
        for kind, runs in sides.items():
            m = {k: _median([r[k] for r in runs]) for k in runs[0]}
            lines.append(
                f"| {key} s | {kind} | {m['wall_over_model']} | {m['loop_lag_p99_ms']} "
                f"| {m['healthz_p99_ms']} | {m['rss_peak_mb']} | {m['kb_per_run']} "
                f"| {m['cpu_per_msg_ms']} | {m['model_max_in_flight']} "
                f"| {sum(r['lost'] for r in runs)} |"
            )
    fair = data["fairness"]
    lines += [
        "",
        f"fairness: the others' p50 beside the flood ÷ alone {fair['p50_ratio']}, slowest "
        f"{fair['max_ratio']}; flood answered {fair['flood_answered']}",
    ]
    return "\n".join(lines)


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def main(mode: str, workdir: Path | None, json_path: Path) -> dict[str, Any]:
    """Run it (on uvloop, in a temp dir unless ``workdir``); the results, also at ``json_path``."""
    import json
    import tempfile

    import uvloop

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with contextlib.ExitStack() as stack:
        wd = workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="hermes-crowd-"))
        )
        wd.mkdir(parents=True, exist_ok=True)
        data = uvloop.run(run(mode, wd, say))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    return data
