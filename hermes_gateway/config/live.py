"""The config the running gateway reads: one holder that every component asks at the moment it
needs a value, so what SIGHUP changes reaches all of them at once and none keeps an old copy."""

from __future__ import annotations

import asyncio
import logging

import structlog

from hermes_gateway.config import RELOADABLE, Config, load_config, reload_changes
from hermes_gateway.errors import ConfigError
from hermes_gateway.platform_spec import PlatformSection

log = structlog.get_logger("hermes.gateway")


class LiveConfig:
    """Holds the config in force. Components keep this holder, never a section of what it
    holds: a section read at construction would be the one from before the next reload."""

    def __init__(self, config: Config) -> None:
        self._config = config

    @property
    def now(self) -> Config:
        return self._config

    def platform(self, name: str) -> PlatformSection:
        section: PlatformSection = getattr(self._config.platforms, name)
        return section

    def take(self, new: Config) -> tuple[list[str], list[str]]:
        """Adopt from ``new`` what SIGHUP may change; every other key keeps the value this
        process started with (the connections, tokens and pools built from it stay as they
        are), so the config in force always says what runs. Returns the keys that differ:
        (applied, needing a restart)."""
        applied, ignored = reload_changes(self._config, new)
        self._config = reloaded(self._config, new)
        return applied, ignored

    async def reload(self, path: str | None) -> bool:
        """Read the config file (off the loop) and take it; False, and nothing changed, when
        the file does not load."""
        try:
            new = await asyncio.to_thread(load_config, path)
        except ConfigError as exc:
            log.error("config.reload_failed", error=str(exc))
            return False
        applied, ignored = self.take(new)
        logging.getLogger().setLevel(self._config.logging.level.upper())
        log.info("config.reloaded", log_level=self._config.logging.level, applied=applied)
        if ignored:  # said out loud: an edit that silently does nothing is the worst kind
            log.warning("config.needs_restart", keys=ignored)
        return True


def reloaded(old: Config, new: Config) -> Config:
    """``old`` with the access keys of each platform and the log level taken from ``new``."""
    platforms: dict[str, PlatformSection] = {}
    for name in type(old.platforms).model_fields:
        section = getattr(old.platforms, name)
        if isinstance(section, PlatformSection):
            fresh = getattr(new.platforms, name)
            platforms[name] = section.model_copy(update={k: getattr(fresh, k) for k in RELOADABLE})
    return old.model_copy(
        update={
            "platforms": old.platforms.model_copy(update=platforms),
            "logging": old.logging.model_copy(update={"level": new.logging.level}),
        }
    )
