"""Singleton work in a cluster (one Telegram poller per bot token), or work a few instances may
do at once (Slack's 10 Socket Mode connections): a leader lease, or one of ``slots`` numbered
ones, an adapter waits for, keeps while it works and gives back; alone it always leads."""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
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
    lease, and `lost` returns once a renewal was refused or the deadline passed unrenewed.
    With ``slots`` it is any one of the leases ``role:0`` .. ``role:<slots-1>``: at most
    that many instances lead at once."""

    def __init__(self, coordinator: Coordinator, role: str, slots: int = 0) -> None:
        self.coordinator = coordinator
        self.role = role
        self.roles = [role] if slots <= 0 else [f"{role}:{i}" for i in range(slots)]
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
        while True:
            if await self.try_acquire():
                return
            await asyncio.sleep(self.retry_s)

    async def try_acquire(self) -> bool:
        """Ask once: True if this instance leads now (False while another does, or while the
        coordination store cannot be reached)."""
        await self.release()
        lease = await self._take()
        if lease is None:
            return False
        self.lease, self.since = lease, time.monotonic()
        self._lost = asyncio.Event()
        self._keeper = asyncio.create_task(self._keep(), name=f"leader:{lease.key}")
        log.info("cluster.leading", role=lease.key, token=lease.token)
        return True

    async def _take(self) -> Lease | None:
        """One round over the roles (from a random one, so stand-bys spread their asks); it
        ends at the first call that cannot reach the coordination store."""
        start = random.randrange(len(self.roles))
        for role in self.roles[start:] + self.roles[:start]:
            try:
                lease = await self.coordinator.lead(role)
            except CoordinationUnavailable:
                return None
            if lease is not None:
                return lease
        return None

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
            log.info("cluster.leader_released", role=lease.key)

    async def _keep(self) -> None:
        """Renew every third of the lease; a renewal that cannot reach the store is tried
        again after `renew_retry_s` until a margin before the deadline."""
        pause = self.coordinator.lease_s / 3
        while self.lease is not None:
            # wakes a margin before the deadline at the latest, so a lease that cannot be
            # renewed is given up while it still holds: the work (a socket) ends before
            # another instance can take the lease
            left = self.lease.deadline - time.monotonic() - self.margin_s
            wait = min(pause, max(0.0, left))
            due = time.monotonic() + wait
            await asyncio.sleep(wait)
            late, lease = round(time.monotonic() - due, 3), self.lease
            pause, reason = self.coordinator.lease_s / 3, "refused"
            try:
                renewed = await self.coordinator.renew(lease)
            except CoordinationUnavailable:  # keep trying, soon, until the margin
                renewed, reason = (lease if self._spare(lease) else None), "deadline"
                pause = self.renew_retry_s
            if renewed is None or not renewed.live:
                log.error("cluster.leader_lost", role=lease.key, reason=reason, late_s=late)
                self._lost.set()
                return
            self.lease = renewed

    def _spare(self, lease: Lease) -> bool:
        return lease.deadline - time.monotonic() > self.margin_s

    def status(self) -> dict[str, Any]:
        left = 0.0 if self.lease is None else self.lease.deadline - time.monotonic()
        return {
            "leading": self.leading,
            "for_s": round(time.monotonic() - self.since, 1) if self.leading else 0.0,
            "lease_left_s": round(max(0.0, left), 1),
            "lease": self.lease.key if self.leading and self.lease is not None else "",
        }
