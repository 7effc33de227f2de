"""What the daemon's start would otherwise import on its event loop (the store's driver and
dialect, redis-py and the cluster, the memory archive, the dashboard, the scheduler: each only
when the config uses it), imported before the loop starts: an import there stalls every timer."""

from __future__ import annotations

import importlib
import time

import structlog
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from hermes_gateway.config import Config

log = structlog.get_logger("hermes.gateway")


def modules_for(config: Config) -> list[str]:
    """The modules ``config`` makes the start import, beyond those imported at module level."""
    from hermes_gateway.memory.wiring import archive_wanted

    names = [
        "hermes_gateway.server",
        "encodings.idna",  # a host name's encoding, at the first connection
        "stringprep",  # PostgreSQL's SCRAM authentication
    ]
    if config.cluster.redis_url:  # the gateway imports these only in cluster mode
        names += [
            f"hermes_gateway.cluster.{m}" for m in ("on_redis", "build", "ownership", "carry")
        ]
    if archive_wanted(config):  # and these only with the memory archive (numpy)
        names += [f"hermes_gateway.memory.{m}" for m in ("archive", "service", "embeddings")]
    if config.dashboard.enabled:
        names.append("hermes_gateway.dashboard")
    if config.scheduler.enabled:
        names.append("hermes_gateway.scheduler.service")
    if config.mcp.active():  # the MCP SDK (its HTTP client, pydantic models, jsonschema)
        names.append("hermes_gateway.mcp.manager")
    return names


def preload(config: Config) -> float:
    """Import them, and the store's dialect and driver; returns the seconds it took. Call it
    before the event loop starts (blocking)."""
    started = time.monotonic()
    for name in modules_for(config):
        importlib.import_module(name)
    try:  # asyncpg or aiosqlite: what `create_async_engine` would import
        make_url(config.store_url).get_dialect().import_dbapi()
    except (ImportError, ArgumentError) as exc:  # the store's open says it the usual way
        log.debug("gateway.preload_skipped", error=str(exc))
    took = time.monotonic() - started
    log.debug("gateway.preloaded", seconds=round(took, 3))
    return took
