"""One side of the comparison (the gateway or the floor): its own fake Bot API and driver,
its running instance, and every figure it produced so far."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench.driver import Driver, Load
from bench.plan import Plan
from bench.procs import (
    ROOT,
    WORKERS,
    BenchError,
    Instance,
    spawn_echo,
    spawn_floor,
    spawn_gateway,
)

START_TIMEOUT_S = 60.0
POLL_S = 0.005  # how often readiness is probed while timing a cold start


class Side:
    """``kind`` is "gateway", "floor" or "baseline" (the gateway of the checkout at ``root``,
    driven like this one's); use ``async with``, which stops what it started."""

    def __init__(
        self,
        kind: str,
        workdir: Path,
        telegram: str,
        llm: str,
        plan: Plan,
        lag_ms: int,
        root: Path = ROOT,
        tune: Callable[[dict[str, Any]], None] | None = None,
        floor_workers: int = WORKERS,
    ) -> None:
        self.kind = kind
        self.tune = tune  # changes the gateway's config (`procs.spawn_gateway`)
        self.floor_workers = floor_workers
        self.root = root
        self.workdir = workdir
        self.telegram = telegram
        self.llm = llm
        self.plan = plan
        self.lag_ms = lag_ms
        self.driver = Driver(telegram, plan.reply_timeout_s)
        self.driver.check = self._check_alive
        self.instance: Instance | None = None
        self.runs: dict[str, list[Any]] = defaultdict(list)  # figure -> one value per run
        self.figures: dict[str, Any] = {}  # single figures
        self.lost: dict[str, int] = defaultdict(int)  # phase -> messages never answered
        self.unsent: dict[str, int] = defaultdict(int)
        self._starts = 0

    async def __aenter__(self) -> Side:
        await self.driver.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.instance is not None:
                await self.stop()
        finally:
            await self.driver.__aexit__(*exc)

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self.driver.http is not None
        return self.driver.http

    def running(self) -> Instance:
        """The instance, checked to be alive (a crash surfaces here, not as a timeout)."""
        if self.instance is None:
            raise BenchError(f"{self.kind}: no instance running")
        self.instance.child.check_alive()
        return self.instance

    def _check_alive(self) -> None:
        if self.instance is not None:
            self.instance.child.check_alive()

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, kind: str | None = None) -> Instance:
        """Spawn a fresh instance (of this side, or ``kind``: "echo") and time it: to
        /healthz (gateway) and to its first getUpdates."""
        if self.instance is not None:
            await self.stop()
        polls = await self.driver.get_updates_count()
        tag = f"{self.kind}-{self._starts}" if self.kind == "baseline" else f"{self._starts}"
        self._starts += 1
        kind = kind or self.kind
        if kind in ("gateway", "baseline"):
            inst = spawn_gateway(
                self.workdir, self.telegram, self.llm, tag, self.lag_ms, self.root, self.tune
            )
        elif kind == "echo":
            inst = spawn_echo(self.workdir, self.telegram, self.llm, tag)
        else:
            inst = spawn_floor(self.workdir, self.telegram, self.llm, tag, self.floor_workers)
        self.instance = inst
        started = inst.child.started
        deadline = time.monotonic() + START_TIMEOUT_S
        if inst.control_url is not None:
            await self._until(lambda: self._healthy(inst), deadline)
            inst.cold_start_s = time.perf_counter() - started
        await self._until(lambda: self._polled(polls), deadline)
        inst.first_poll_s = time.perf_counter() - started
        if inst.control_url is None:
            inst.cold_start_s = inst.first_poll_s
        return inst

    async def stop(self) -> None:
        inst, self.instance = self.instance, None
        if inst is not None:
            await asyncio.to_thread(inst.stop)

    async def _until(self, probe: Any, deadline: float) -> None:
        while not await probe():
            assert self.instance is not None
            self.instance.child.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"{self.kind} not ready in {START_TIMEOUT_S}s")
            await asyncio.sleep(POLL_S)

    async def _healthy(self, inst: Instance) -> bool:
        try:
            timeout = aiohttp.ClientTimeout(total=1)
            async with self.http.get(f"{inst.control_url}/healthz", timeout=timeout) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def _polled(self, before: int) -> bool:
        return await self.driver.get_updates_count() > before

    # -- the fake LLM (shared by both sides; phases run one side at a time) ---------------

    async def llm_reset(self, delay: float = 0.0) -> None:
        root = self.llm.removesuffix("/v1")
        async with self.http.post(f"{root}/_fake/reset", json={"delay": delay}) as resp:
            resp.raise_for_status()

    async def llm_stats(self) -> dict[str, Any]:
        root = self.llm.removesuffix("/v1")
        async with self.http.get(f"{root}/_fake/stats") as resp:
            data: dict[str, Any] = await resp.json()
            return data

    # -- bookkeeping --------------------------------------------------------------------

    def deadline(self) -> float:
        return time.monotonic() + self.plan.phase_timeout_s

    def account(self, phase: str, load: Load) -> Load:
        self.lost[phase] += load.lost
        self.unsent[phase] += load.unsent
        return load

    def gateway_metrics_url(self) -> str | None:
        inst = self.instance
        return f"{inst.control_url}/metrics" if inst and inst.control_url else None
