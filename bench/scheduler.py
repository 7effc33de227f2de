"""``python -m bench.scheduler [--jobs N] [--postgres URL] [--json PATH]``: N scheduled jobs
due in the same minute, claimed and started by the real `Scheduler` and `Ledger` on SQLite
(and PostgreSQL when a URL is given), in this process.

Reported, per store: the time to claim and start them all; the event loop's lag p99 while
they fire (a 10 ms sleeper's overshoot); and the chat path's store work (accept a message,
store its turn, mark it answered: what every chat message costs in the store, which is the
resource a burst of jobs contends for) as the ratio of its p50 during the burst to its p50
before it. Job turns are instant (`InstantRunner`, no model call): this measures the
scheduler's own cost, not the model's; the pool's fairness to chats is a property of the cap
(`max_parallel` < `runner.workers`), not a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import structlog
import uvloop
from sqlalchemy import Table, func, insert, select

from hermes_gateway.config.schema import SchedulerConfig
from hermes_gateway.core.job_turns import JobAnswer, JobTurn, TurnOutcome
from hermes_gateway.events import MessageEvent
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.scheduler import Scheduler
from hermes_gateway.store.models import CronJobRow, CronRunRow
from hermes_gateway.store.store import Store

LAG_TARGET_S, RATIO_TARGET = 0.020, 1.5


class InstantRunner:
    """A job turn that answers at once (`[SILENT]`: nothing to deliver)."""

    async def run_job(self, turn: JobTurn) -> TurnOutcome:
        return TurnOutcome("succeeded", "[SILENT]")

    async def deliver_job(self, answer: JobAnswer) -> str:
        return "skipped"  # nothing is delivered

    def stop_jobs(self) -> None:
        pass


async def add_due_jobs(store: Store, n: int, now: float) -> None:
    rows = [
        {
            "id": f"b{i:07d}",
            "name": "bench",
            "prompt": "p",
            "schedule": "0 * * * *",
            "kind": "cron",
            "timezone": "UTC",
            "anchor": 0,
            "every_s": 0,
            "deliver": "none",
            "origin_platform": "telegram",
            "origin_chat_type": "dm",
            "origin_chat_id": str(i % 100),
            "origin_thread_id": None,
            "origin_user_id": "u",
            "created_by": "operator",
            "state": "active",
            "next_run_at": int(now) - 5,
            "repeat": None,
            "runs": 0,
            "catch_up": "one",
            "grace_s": None,
            "timeout_s": None,
            "created_at": now,
            "updated_at": now,
        }
        for i in range(n)
    ]
    table = cast(Table, CronJobRow.__table__)
    for start in range(0, n, 1000):
        chunk = rows[start : start + 1000]
        await store.write(lambda db, c=chunk: db.execute(insert(table), c))


async def finished(store: Store) -> int:
    runs = cast(Table, CronRunRow.__table__)

    async def count(db: Any) -> int:
        stmt = select(func.count()).where(runs.c.status == "succeeded")
        return int(await db.scalar(stmt) or 0)

    return await store.read(count)


async def chat_ops(store: Store, stop: asyncio.Event, out: list[float]) -> None:
    """One chat message's store work every 20 ms, timed."""
    i = 0
    while not stop.is_set():
        i += 1
        event = MessageEvent.create(
            platform="telegram", chat_type="dm", chat_id="9", user_id="9",
            message_id=f"{time.time_ns()}-{i}", text="hi",
        )  # fmt: skip
        started = time.perf_counter()
        inbox_id = await store.accept(event)
        assert inbox_id is not None
        turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        await store.complete_turn(event.session_key, turn, [inbox_id], "hello", f"r{i}")
        await store.mark([inbox_id], "answered")
        out.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)


async def lag_sampler(stop: asyncio.Event, out: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.01)
        out.append(max(0.0, time.perf_counter() - started - 0.01))


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def measure(url: str, n: int) -> dict[str, Any]:
    store = Store(url)
    await store.open()
    try:
        now = time.time()
        await add_due_jobs(store, n, now)
        config = SchedulerConfig(enabled=True, max_parallel=8)
        ledger = Ledger(store, "bench:1:x", config.lease_s)
        sched = Scheduler(lambda: config, ledger, InstantRunner(), workers=9)
        stop, idle, busy, lags, idle_lags = asyncio.Event(), [], [], [], []
        baseline = [
            asyncio.create_task(chat_ops(store, stop, idle)),
            asyncio.create_task(lag_sampler(stop, idle_lags)),
        ]
        await asyncio.sleep(3)
        stop.set()
        await asyncio.gather(*baseline)
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(chat_ops(store, stop, busy)),
            asyncio.create_task(lag_sampler(stop, lags)),
        ]
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        await sched.tick()
        claimed_s = time.perf_counter() - started
        while await finished(store) < n:  # noqa: ASYNC110  # the count is in the database
            await asyncio.sleep(0.05)
        all_s = time.perf_counter() - started
        stop.set()
        await asyncio.gather(*tasks)
        await sched.stop()
        ratio = statistics.median(busy) / statistics.median(idle)
        return {
            "jobs": n,
            "claim_all_s": round(claimed_s, 2),
            "claim_and_run_all_s": round(all_s, 2),
            "claims_per_s": round(n / claimed_s),
            "loop_lag_p99_ms": round(p(lags, 0.99) * 1000, 2),
            "loop_lag_p99_idle_ms": round(p(idle_lags, 0.99) * 1000, 2),
            "loop_lag_target_ms": LAG_TARGET_S * 1000,
            "chat_store_p50_idle_ms": round(statistics.median(idle) * 1000, 2),
            "chat_store_p50_burst_ms": round(statistics.median(busy) * 1000, 2),
            "chat_store_ratio": round(ratio, 2),
            "chat_ratio_target": RATIO_TARGET,
            "loop_lag_met": p(lags, 0.99) < LAG_TARGET_S,
            "chat_ratio_met": ratio <= RATIO_TARGET,
            # the machine's 1-minute load average as the burst began and as it ended
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
    finally:
        await store.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = await measure(f"sqlite+aiosqlite:///{tmp}/state.db", args.jobs)
    if args.postgres:
        results["postgresql"] = await measure(args.postgres, args.jobs)
    return results


def main(argv: list[str] | None = None) -> int:
    # one info line per claimed job would be the bench's own cost: warnings only
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(prog="python -m bench.scheduler", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--postgres", help="postgresql+asyncpg://... (an empty database)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    results = uvloop.run(main_async(args))
    for store, r in results.items():
        print(
            f"{store}: {r['jobs']} due jobs claimed in {r['claim_all_s']} s "
            f"({r['claims_per_s']}/s), all claimed and started (and run) in "
            f"{r['claim_and_run_all_s']} s; load average {r['load_average'][0]} -> "
            f"{r['load_average'][1]}"
        )
        print(
            f"  loop lag p99 {r['loop_lag_p99_ms']} ms in the burst "
            f"({r['loop_lag_p99_idle_ms']} ms idle): target < {LAG_TARGET_S * 1000:g} ms, "
            + ("met" if r["loop_lag_met"] else "NOT met")
        )
        print(
            f"  chat store work p50 {r['chat_store_p50_burst_ms']} ms in the burst vs "
            f"{r['chat_store_p50_idle_ms']} ms idle: x{r['chat_store_ratio']}, target <= "
            f"x{RATIO_TARGET:g}, " + ("met" if r["chat_ratio_met"] else "NOT met")
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
