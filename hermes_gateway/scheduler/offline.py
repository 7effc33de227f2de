"""`hermes cron run ID` while the gateway is down (an exported systemd timer fired): the job's
turn runs in this process, on the same store and config, claimed like any run, through a runner
of its own (as in the gateway); its answer is recorded `pending` with the lease let go, so the
gateway delivers it at its next start."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.agents.factory import AgentFactory, confine_tools
from hermes_gateway.config import Config
from hermes_gateway.core.bus import EventBus
from hermes_gateway.core.delivery import Delivery
from hermes_gateway.core.job_turns import SILENT
from hermes_gateway.core.pool import AgentPool
from hermes_gateway.core.runner import GatewayRunner
from hermes_gateway.errors import StoreError
from hermes_gateway.metrics import Metrics
from hermes_gateway.scheduler.job_turn import turn_of
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.store.store import Store

EXIT_OK = 0
EXIT_FAILURE = 1


async def run_offline(config: Config, config_path: str | None, job_id: str) -> int:
    store = Store(config.store_url)
    try:
        await store.open()
    except StoreError as exc:
        print(f"hermes: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    pool = AgentPool(1)
    factory = AgentFactory(config, config_path)
    try:
        await asyncio.to_thread(confine_tools, config, config_path)
        owner = f"{socket.gethostname()[:64]}:{os.getpid()}:cli"
        ledger = Ledger(store, owner, config.scheduler.lease_s)
        return await _run(config, ledger, store, factory, pool, job_id)
    except StoreError as exc:
        print(f"hermes: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await asyncio.to_thread(pool.shutdown)
        factory.close()
        await store.close()


async def _run(
    config: Config,
    ledger: Ledger,
    store: Store,
    factory: AgentFactory,
    pool: AgentPool,
    job_id: str,
) -> int:
    job = await ledger.get(job_id)
    if job is None:
        print(f"hermes: no job {job_id!r}", file=sys.stderr)
        return EXIT_FAILURE
    now = time.time()
    run_id = await ledger.claim_now(job, now)
    if run_id is None or not await ledger.start(run_id, now):
        print(f"hermes: job {job_id} is running already", file=sys.stderr)
        return EXIT_FAILURE
    runner = _runner(config, store, factory, pool)
    beat = asyncio.create_task(_heartbeat(ledger, run_id))
    try:
        timeout = job.timeout_s or config.scheduler.run_timeout_s
        outcome = await runner.run_job(turn_of(job, run_id, int(now), timeout))
    finally:
        beat.cancel()
    silent = outcome.status == "succeeded" and outcome.text == SILENT
    delivery = "skipped" if silent or job.deliver == "none" else "pending"
    ended = (outcome.status, time.time(), outcome.text, outcome.error, delivery, outcome.files)
    await ledger.finish(run_id, *ended)
    await ledger.let_go([run_id], time.time())  # the gateway takes the delivery over
    print(f"job {job_id} run {run_id}: {outcome.status}; delivery {delivery}")
    if delivery == "pending":
        print("the answer is delivered by the gateway (at once if it runs, else at its start)")
    return EXIT_OK if outcome.status == "succeeded" else EXIT_FAILURE


def _runner(config: Config, store: Store, factory: AgentFactory, pool: AgentPool) -> GatewayRunner:
    """A runner for the one turn: no adapters (nothing is delivered from here)."""
    bus, metrics = EventBus(timeout=config.hook_timeout_s), Metrics()
    return GatewayRunner(
        config.runner,
        store=store,
        bus=bus,
        pool=pool,
        agents=AgentCache(factory.make, store.history, max_size=1, idle_ttl_s=60),
        delivery=Delivery({}, store, bus, metrics),
        metrics=metrics,
    )


async def _heartbeat(ledger: Ledger, run_id: int) -> None:
    while True:
        await asyncio.sleep(ledger.lease_s / 3)
        try:
            await ledger.heartbeat([run_id], time.time())
        except StoreError:
            pass
