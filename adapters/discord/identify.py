"""Spacing of a sharded bot's IDENTIFYs: Discord allows one per 5 s per `max_concurrency`
bucket (shard id % max_concurrency) across the whole bot, so in a cluster each IDENTIFY first
passes its bucket's gate in the coordination store, shared by every instance."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import structlog

import discord
from hermes_gateway.platforms import CoordinationUnavailable, Shares

log = structlog.get_logger("hermes.adapters.discord")


async def concurrency(client: discord.Client, limit: Any | None) -> int:
    """The bot's `max_concurrency` from ``limit`` (GET /gateway/bot's session_start_limit),
    fetched if not given; 1 (one bucket: every IDENTIFY spaced) when Discord does not say."""
    if limit is None:
        try:
            _count, _url, limit = await client.http.get_bot_gateway()
        except (discord.DiscordException, OSError, TimeoutError) as exc:
            log.warning("discord.gateway_limits_unknown", error=repr(exc), max_concurrency=1)
            return 1
    try:
        return max(1, int(limit.get("max_concurrency", 1)))
    except (AttributeError, TypeError, ValueError):
        return 1


class Pacer:
    """Called before each IDENTIFY of this instance's shard clients. A first IDENTIFY waits
    for this instance's previous one (`identify_delay_s`), a later one (a session Discord did
    not resume) sleeps that long, as on one process; in a cluster it then passes its bucket's
    gate, waiting while another instance just passed it (at most `max_wait_s`, with jitter).
    When the coordination store cannot be reached, the local spacing alone holds (logged)."""

    jitter_s = 0.2

    def __init__(self, shares: Shares, delay_s: Callable[[], float], buckets: int = 1) -> None:
        self.shares = shares
        self.delay_s = delay_s  # read at each use: a reload may change it
        self.buckets = max(1, buckets)
        self._lock = asyncio.Lock()
        self._last = -float("inf")
        self.waited_s = 0.0  # at the gates, for the log and tests

    @property
    def max_wait_s(self) -> float:
        """Long enough for every shard of a bucket to pass once before this one."""
        return self.delay_s() * (self.shares.count // self.buckets + 2)

    async def __call__(self, shard_id: int | None, initial: bool) -> None:
        delay = self.delay_s()
        if not initial:
            if delay > 0:
                await asyncio.sleep(delay)
        else:
            async with self._lock:
                wait = self._last + delay - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._last = time.monotonic()
        if not self.shares.everything and delay > 0:
            await self._gate((shard_id or 0) % self.buckets, delay)

    async def _gate(self, bucket: int, delay: float) -> None:
        started = time.monotonic()
        name = f"identify:{bucket}"
        while True:
            try:
                shut = await self.shares.gate(name, delay)
            except CoordinationUnavailable as exc:
                log.warning("discord.identify_gate_unavailable", bucket=bucket, error=str(exc))
                return
            waited = time.monotonic() - started
            if shut <= 0:
                self.waited_s += waited
                return
            if waited + shut > self.max_wait_s:
                log.warning("discord.identify_gate_timeout", bucket=bucket, waited_s=waited)
                return
            await asyncio.sleep(shut + random.uniform(0, self.jitter_s))
