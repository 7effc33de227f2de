"""Periodic upkeep of a long-running gateway: idle agents evicted, settled inbox entries and
downloaded media past their retention removed. Disk work runs in a thread, never on the loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import structlog

from hermes_gateway.agents.cache import AgentCache
from hermes_gateway.config import Config
from hermes_gateway.config.live import LiveConfig
from hermes_gateway.errors import StoreError
from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.housekeeping")


class Housekeeper:
    """Runs `sweep` every `interval_s` until cancelled."""

    interval_s = 60.0

    def __init__(self, config: LiveConfig, agents: AgentCache, store: Store) -> None:
        self.live = config
        self.agents = agents
        self.store = store

    @property
    def config(self) -> Config:
        return self.live.now

    async def run(self) -> None:
        while True:
            await self.sweep()
            await asyncio.sleep(self.interval_s)

    async def sweep(self) -> None:
        evicted = self.agents.sweep()
        if evicted:
            log.debug("agents.swept", evicted=evicted)
        with contextlib.suppress(StoreError):
            await self.store.prune(self.config.store.inbox_retention_days)
        days = self.config.store.media_retention_days
        removed = await asyncio.to_thread(prune_media, self.config.home_path / "media", days)
        if removed:
            log.info("media.pruned", files=removed, retention_days=days)


def prune_media(folder: Path, retention_days: float) -> int:
    """Delete the files in ``folder`` not modified for ``retention_days`` (attachments are
    fetched again on demand, so an old one costs a download at most); the count removed."""
    cutoff = time.time() - retention_days * 86400
    removed = 0
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return 0
    for path in entries:
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError as exc:  # gone meanwhile, or not ours to delete: try again next sweep
            log.debug("media.prune_failed", path=str(path), error=str(exc))
    return removed
