"""Builds the gateway's memory parts from the config: the embeddings client (defaulting to the
chat model's endpoint), the archive service when any platform enables a `hindsight_*` tool or
`memory.auto_retain` is on, and the tools' host."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from agent_core import LLMClient, LLMSettings
from hermes_gateway.config import Config
from hermes_gateway.memory.host import MemoryHost
from hermes_gateway.store.store import Store

if TYPE_CHECKING:
    from hermes_gateway.core.run import LiveRuns
    from hermes_gateway.memory.embeddings import EmbeddingSettings

log = structlog.get_logger("hermes.memory")
ARCHIVE_TOOLS = ("hindsight_retain", "hindsight_recall", "hindsight_reflect", "hindsight_forget")


def archive_wanted(config: Config) -> bool:
    names = {n for p in config.platforms.enabled() for n in config.tools.enabled_for(p)}
    return config.memory.auto_retain or any(n in names for n in ARCHIVE_TOOLS)


def embedding_settings(config: Config) -> EmbeddingSettings | None:
    """`memory.embeddings`, each empty key taken from `model` (the key only for the same
    endpoint); None when that endpoint is not usable (no key for a hosted API)."""
    from hermes_gateway.memory.embeddings import EmbeddingSettings  # the archive's alone

    e, m = config.memory.embeddings, config.model
    settings = EmbeddingSettings(
        base_url=e.base_url or m.base_url,
        api_key=e.api_key or (m.api_key if not e.base_url else ""),
        model=e.model,
        batch_size=e.batch_size,
        timeout_s=e.timeout_s,
        max_retries=m.max_retries,
    )
    # the chat client's rule: a hosted API needs a key, a local server may not (no connection
    # is made here: the client is built at its first call)
    probe = LLMClient(LLMSettings(settings.base_url, settings.api_key, settings.model))
    return settings if probe.configured else None


def build_memory(config: Config, store: Store, llm: LLMClient, runs: LiveRuns) -> MemoryHost:
    service = None
    if archive_wanted(config):  # imported only then: the archive's vectors need numpy (~15 MB)
        from hermes_gateway.memory.archive import Archive
        from hermes_gateway.memory.embeddings import Embedder
        from hermes_gateway.memory.service import MemoryService

        found = embedding_settings(config)
        if found is None:
            log.warning("memory.no_embeddings", fallback="keywords")
        mem = config.memory
        service = MemoryService(
            Archive(store),
            llm,
            Embedder(found) if found is not None else None,
            extract=mem.extract,
            token_budget=mem.token_budget,
            recall_limit=mem.recall_limit,
            busy=runs.busy,  # auto-retain waits for a quiet moment
            outage_pause_s=mem.embeddings.outage_pause_s,
        )
    timeout = config.memory.embeddings.timeout_s * (config.model.max_retries + 1) + 30
    if config.memory.extract:
        timeout += config.model.timeout_s * (config.model.max_retries + 1)
    return MemoryHost(runs, service, store, scope=config.memory.scope, timeout_s=timeout)
