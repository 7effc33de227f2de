"""The bench's measurements, each on one side; `suite` interleaves the two sides' runs.

Every phase records raw values per run in ``side.runs`` (summarised into medians later) and
its lost messages in ``side.lost``; none of them can wait longer than the plan's timeouts.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from typing import Any

from bench import lag
from bench.driver import Load, percentile
from bench.procs import WORKERS
from bench.side import Side

MS = 1000.0


def _ms(seconds: float) -> float:
    return round(seconds * MS, 3)


async def _bot_calls(side: Side) -> dict[str, int]:
    calls: dict[str, int] = (await side.driver.fake_stats())["calls"]
    return calls


def _calls_per_msg(before: dict[str, int], after: dict[str, int], messages: int) -> float:
    """Bot API calls the system made per answered message, long polls excluded."""
    made = sum(n - before.get(k, 0) for k, n in after.items() if k != "getUpdates")
    return round(made / messages, 2) if messages else 0.0


def _polls_per_msg(before: dict[str, int], after: dict[str, int], messages: int) -> float:
    made = after.get("getUpdates", 0) - before.get("getUpdates", 0)
    return round(made / messages, 2) if messages else 0.0


async def harness_ceiling(side: Side) -> None:
    """The echo bot on this side's fake at `ceiling` sessions: what the harness can move."""
    await side.start("echo")
    sessions, per_session = side.plan.ceiling
    load = await side.driver.sessions(side.driver.new_chats(sessions), per_session, side.deadline())
    await side.stop()
    side.figures["harness_ceiling_msg_s"] = round(load.rate, 1)
    side.figures["harness_lost"] = load.lost


async def cold_start(side: Side, keep: bool) -> None:
    """Spawn, time the start, measure idle RSS; stop it again unless ``keep``."""
    inst = await side.start()
    side.runs["cold_start_s"].append(round(inst.cold_start_s, 4))
    side.runs["first_poll_s"].append(round(inst.first_poll_s, 4))
    side.runs["rss_idle_mb"].append(round(await inst.idle_rss_mb(side.plan.rss_settle_s), 2))
    if not keep:
        await side.stop()


async def first_message(side: Side) -> None:
    """The first message after start, which pays for whatever is initialised lazily."""
    inst = side.running()
    [chat] = side.driver.new_chats(1)
    load = side.account("first", await side.driver.sequential(chat, 1, side.deadline()))
    side.figures["first_message_ms"] = _ms(load.latencies[0]) if load.latencies else None
    # both sides have now loaded all they need to answer: the floor imports the SDK's chat
    # resources (~14 MB) at its first call, where the gateway warmed its client after ready
    side.figures["rss_warm_mb"] = round(await inst.idle_rss_mb(side.plan.rss_settle_s), 2)


async def idle_cpu(side: Side) -> None:
    """CPU burnt with nothing to do (watchdog, polling, timers), warm: ms per second."""
    inst = side.running()
    cpu, started = inst.cpu_s(), time.perf_counter()
    await asyncio.sleep(side.plan.idle_s)
    idle = (inst.cpu_s() - cpu) / (time.perf_counter() - started)
    side.figures["idle_cpu_ms_per_s"] = _ms(idle)


async def latency(side: Side) -> int:
    """One session, `sequential` messages one after another; returns the session's chat."""
    inst = side.running()
    [chat] = side.driver.new_chats(1)
    await side.llm_reset()
    calls = await _bot_calls(side)
    cpu = inst.cpu_s()
    load = side.account(
        "latency", await side.driver.sequential(chat, side.plan.sequential, side.deadline())
    )
    cpu = inst.cpu_s() - cpu
    lat = load.latencies
    side.runs["latency_p50_ms"].append(_ms(percentile(lat, 0.5)))
    side.runs["latency_p99_ms"].append(_ms(percentile(lat, 0.99)))
    side.runs["cpu_per_msg_ms"].append(_ms(cpu / max(1, load.answered)))
    after = await _bot_calls(side)
    side.runs["bot_calls_per_msg"].append(_calls_per_msg(calls, after, load.answered))
    side.runs["polls_per_msg"].append(_polls_per_msg(calls, after, load.answered))
    llm = await side.llm_stats()
    side.runs["llm_requests_per_msg"].append(round(llm["requests"] / max(1, load.answered), 2))
    return chat


async def history(side: Side, chat: int) -> None:
    """p50 with `sequential` turns of history (``chat`` holds them) against p50 at 1 turn
    (the second message of new sessions)."""
    side.running()
    plan, driver = side.plan, side.driver
    deep = side.account(
        "history", await driver.sequential(chat, plan.history_extra, side.deadline())
    )
    # proof that the history really goes out: the messages the last model request carried
    side.figures["history_llm_messages"] = (await side.llm_stats())["last_messages"]
    shallow = Load()
    for fresh in driver.new_chats(plan.history_fresh):
        load = side.account("history", await driver.sequential(fresh, 2, side.deadline()))
        if load.answered == 2:
            shallow.latencies.append(load.latencies[1])
    p_deep, p_one = percentile(deep.latencies, 0.5), percentile(shallow.latencies, 0.5)
    side.figures["history_turns"] = plan.sequential
    side.figures["history_p50_1_ms"] = _ms(p_one)
    side.figures["history_p50_deep_ms"] = _ms(p_deep)
    side.figures["history_slope"] = round(p_deep / p_one, 3) if p_one > 0 else None


async def throughput(side: Side, sessions: int, per_session: int) -> None:
    """``sessions`` new chats at once, each sending its next message when answered."""
    inst = side.running()
    chats = side.driver.new_chats(sessions)
    metrics_url = side.gateway_metrics_url()
    before = await _scrape(side, metrics_url)
    calls = await _bot_calls(side)
    await side.llm_reset()
    cpu = inst.cpu_s()
    load = await side.driver.sessions(chats, per_session, side.deadline())
    cpu = inst.cpu_s() - cpu
    side.account(f"throughput_{sessions}", load)
    key = f"throughput_{sessions}"
    side.runs[key].append(round(load.rate, 2))
    side.runs[f"{key}_latency_p50_ms"].append(_ms(percentile(load.latencies, 0.5)))
    side.runs[f"{key}_latency_p99_ms"].append(_ms(percentile(load.latencies, 0.99)))
    side.runs[f"{key}_cpu_per_msg_ms"].append(_ms(cpu / max(1, load.answered)))
    after = await _bot_calls(side)
    side.runs[f"{key}_bot_calls_per_msg"].append(_calls_per_msg(calls, after, load.answered))
    side.runs[f"{key}_polls_per_msg"].append(_polls_per_msg(calls, after, load.answered))
    if sessions == max(side.plan.throughput) and before is not None:
        scraped = await _scrape(side, metrics_url)
        assert scraped is not None
        total = side.figures.get("loop_lag_buckets") or {}
        side.figures["loop_lag_buckets"] = lag.add(total, lag.diff(scraped, before))


async def _scrape(side: Side, url: str | None) -> lag.Buckets | None:
    if url is None:
        return None
    async with side.http.get(url) as resp:
        return lag.parse(await resp.text())


async def slow_model(side: Side) -> None:
    """The 200 ms model, `slow_sessions` new sessions x 1 message, all at once: wall time,
    and the most model calls in flight at once (should be the pool size, `WORKERS`)."""
    side.running()
    plan = side.plan
    await side.llm_reset(plan.slow_delay_s)
    try:
        load = await side.driver.sessions(
            side.driver.new_chats(plan.slow_sessions), 1, side.deadline()
        )
        stats = await side.llm_stats()
    finally:
        await side.llm_reset(0.0)
    side.account("slow_model", load)
    side.runs["slow_wall_s"].append(round(load.wall_s, 3))
    side.runs["slow_peak_parallel"].append(int(stats["max_in_flight"]))
    side.figures["slow_pool_bound_s"] = round(
        math.ceil(plan.slow_sessions / WORKERS) * plan.slow_delay_s, 3
    )


async def memory(side: Side) -> None:
    """A fresh instance; RSS after N1 and N2 distinct sessions sent one message each."""
    inst = await side.start()
    plan = side.plan
    small, large = plan.memory_sessions
    rss: dict[str, float] = {}
    done = 0
    for target in (small, large):
        chats = side.driver.new_chats(target - done)
        load = await side.driver.flood(chats, plan.memory_concurrency, _long_deadline(side))
        side.account("memory", load)
        side.figures[f"memory_rate_{target}"] = round(load.rate, 2)
        done = target
        await asyncio.sleep(0.5)  # let replies settle before reading RSS
        rss[str(target)] = round(inst.rss_mb(), 2)
    side.figures["rss_after_sessions_mb"] = rss
    slope = (rss[str(large)] - rss[str(small)]) * 1024 / (large - small)
    side.figures["kb_per_session"] = round(slope, 2)
    await side.stop()


def _long_deadline(side: Side) -> float:
    # the memory phase is the longest by design: several phase timeouts
    return side.deadline() + 4 * side.plan.phase_timeout_s


def medians(side: Side) -> dict[str, Any]:
    """Each per-run figure as the median of its runs (with the runs kept alongside)."""
    out: dict[str, Any] = {}
    for key, values in side.runs.items():
        present = [v for v in values if v is not None]
        out[key] = round(statistics.median(present), 4) if present else None
        if len(values) > 1 or key == "slow_peak_parallel":
            out[f"{key}_runs"] = values
    return out
