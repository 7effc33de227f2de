"""Singleton work in a cluster (one Telegram poller per bot token): a leader lease an adapter
waits for, keeps while it works and gives back; without `cluster.redis_url` it always leads."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

import structlog

from hermes_gateway.cluster.lease import Coordinator, Lease
from hermes_gateway.errors import CoordinationUnavailable

log = structlog.get_logger("hermes.cluster")


class SoleLeader:
    """One process: this instance always leads; nothing to wait for, nothing to lose."""

    def __init__(self, role: str) -> None:
        self.role = role

    @property
    def leading(self) -> bool:
        return True

    async def acquire(self) -> None:
        return None

    def remaining(self) -> float:
        return math.inf

    async def lost(self) -> None:
        await asyncio.get_running_loop().create_future()

    async def release(self) -> None:
        return None


class ClusterLeader:
    """The leader lease of ``role`` through the coordinator: `acquire` waits until this
    instance holds it (asking again every `retry_s`), a task renews it every third of the
    lease, and `lost` returns once a renewal was refused or the deadline passed unrenewed."""

    def __init__(self, coordinator: Coordinator, role: str) -> None:
        self.coordinator = coordinator
        self.role = role
        self.retry_s = min(1.0, coordinator.lease_s / 4)  # how often a stand-by asks
        self.margin_s = min(1.0, coordinator.lease_s / 4)  # work ends this long before the lease
        self.renew_retry_s = min(0.5, coordinator.lease_s / 10)  # after a renewal that failed
        self.lease: Lease | None = None
        self.since = 0.0  # monotonic time this instance began to lead
        self._lost = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None

    @property
    def leading(self) -> bool:
        return self.lease is not None and self.lease.live and not self._lost.is_set()

    async def acquire(self) -> None:
        await self.release()
        while True:
            with contextlib.suppress(CoordinationUnavailable):
                lease = await self.coordinator.lead(self.role)
                if lease is not None:
                    break
            await asyncio.sleep(self.retry_s)
        self.lease, self.since = lease, time.monotonic()
        self._lost = asyncio.Event()
        self._keeper = asyncio.create_task(self._keep(), name=f"leader:{self.role}")
        log.info("cluster.leading", role=self.role, token=lease.token)

    def remaining(self) -> float:
        """Seconds of work that surely end before the lease does (0 when not leading)."""
        if not self.leading or self.lease is None:
            return 0.0
        return max(0.0, self.lease.deadline - time.monotonic() - self.margin_s)

    async def lost(self) -> None:
        await self._lost.wait()

    async def release(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
            self._keeper = None
        lease, self.lease = self.lease, None
        if lease is not None and lease.live:
            with contextlib.suppress(CoordinationUnavailable):
                await self.coordinator.release(lease)
            log.info("cluster.leader_released", role=self.role)

    async def _keep(self) -> None:
        """Renew every third of the lease; a renewal that cannot reach the store is tried
        again after `renew_retry_s` until the deadline."""
        pause = self.coordinator.lease_s / 3
        while self.lease is not None:
            # wakes by the deadline at the latest, so a lease lost unrenewed is noticed then
            wait = min(pause, max(0.0, self.lease.deadline - time.monotonic()))
            due = time.monotonic() + wait
            await asyncio.sleep(wait)
            late, lease = round(time.monotonic() - due, 3), self.lease
            pause, reason = self.coordinator.lease_s / 3, "refused"
            try:
                renewed = await self.coordinator.renew(lease)
            except CoordinationUnavailable:
                renewed, reason = (lease if lease.live else None), "deadline"
                pause = self.renew_retry_s
            if renewed is None or not renewed.live:
                log.error("cluster.leader_lost", role=self.role, reason=reason, late_s=late)
                self._lost.set()
                return
            self.lease = renewed

    def status(self) -> dict[str, Any]:
        left = 0.0 if self.lease is None else self.lease.deadline - time.monotonic()
        return {
            "leading": self.leading,
            "for_s": round(time.monotonic() - self.since, 1) if self.leading else 0.0,
            "lease_left_s": round(max(0.0, left), 1),
        }
