"""Builds each session's `AIAgent` from the config: the model clients, every platform's
toolset and system prompt, the settings the tools run with, and their confinement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog

from agent_core import AIAgent, LLMClient, LLMSettings
from agent_core.parallel import ToolExecutor
from agent_core.prompt import build_system_prompt
from hermes_gateway.config import Config, tool_environment
from hermes_gateway.logs import Redactor
from tools import ToolRegistry, memory_group, sandbox
from tools.catalog import (
    CodeSettings,
    TerminalSettings,
    ToolSettings,
    WebSettings,
    build_registry,
)
from tools.host import ToolHost
from tools.memory import memory_block, memory_file

if TYPE_CHECKING:
    from hermes_gateway.mcp.manager import McpManager

log = structlog.get_logger("hermes.gateway")


@dataclass(frozen=True, slots=True)
class ModelClients:
    """The chat model's client and the one `describe_image` uses (the same unless
    `tools.vision` names another model): built first, the tools and memory call them too."""

    llm: LLMClient
    vision: LLMClient


def model_clients(
    config: Config, config_path: str | None = None, connections: int | None = None
) -> ModelClients:
    """``connections``: the chat model client's pool (one for each run that may call at once:
    the agent pool's size); None leaves the SDK's."""
    llm = LLMClient(replace(_llm_settings(config, config_path), connections=connections))
    return ModelClients(llm, _vision_llm(config, llm))


class SessionTools(Protocol):
    """Tools a session gets besides its platform's (the MCP servers' it may use)."""

    def live(self, base: ToolRegistry, session_key: str) -> ToolRegistry: ...


class AgentFactory:
    """One per gateway; `make` is the agent cache's constructor."""

    def __init__(
        self,
        config: Config,
        config_path: str | None = None,
        *,
        clients: ModelClients | None = None,
        host: ToolHost | None = None,
        owner: Callable[[str], str | None] = lambda key: None,
        extra: SessionTools | None = None,
    ) -> None:
        self.config = config
        clients = clients or model_clients(config, config_path)
        self.llm, self.vision_llm = clients.llm, clients.vision
        self.tool_settings = _tool_settings(config)
        self.executor = ToolExecutor(config.tools.parallel_workers)
        # the gateway's callbacks (approvals, delivery, attachments, memory); None offline
        self.host = host
        # session key -> the user it belongs to alone ("<platform>/<id>"), for per-user memory
        self.owner = owner
        self.extra = extra
        self._toolsets: dict[str, tuple[ToolRegistry, str]] = {}

    def toolset(self, platform: str) -> tuple[ToolRegistry, str]:
        """The tools (and the system prompt naming them) for sessions on ``platform``:
        `tools.enabled`, or the platform's own list from `tools.platforms`."""
        found = self._toolsets.get(platform)
        if found is None:
            registry = build_registry(self.config.tools.enabled_for(platform), self.tool_settings)
            prompt = build_system_prompt(self.config.model.system_prompt, registry.names)
            found = self._toolsets[platform] = (registry, prompt)
        return found

    def make(self, session_key: str) -> AIAgent:
        tools, prompt = self.toolset(session_key.split(":", 1)[0])
        if self.extra is not None:
            tools = self.extra.live(tools, session_key)
        config = self.config
        home, cap = config.home_path, config.tools.memory_max_chars
        path = memory_file(home, self.owner(session_key), config.memory.scope == "user")
        return AIAgent(
            self.llm,
            tools,
            system_prompt=prompt,
            workspace=config.workspace_path,
            session_key=session_key,
            max_iterations=config.model.max_iterations,
            max_output_chars=config.tools.max_output_chars,
            host=self.host,
            executor=self.executor,
            context_budget=config.model.context_budget,
            # read once, on the worker thread; a session several users share shows no one's
            memory=(lambda: memory_block(home, cap, path)) if path is not None else None,
            max_depth=config.tools.delegate.max_depth,
            child_iterations=config.tools.delegate.max_iterations,
        )

    def close(self) -> None:
        """After the agent pool has stopped: no run is left to use the clients."""
        self.executor.shutdown()
        self.llm.close()
        if self.vision_llm is not self.llm:
            self.vision_llm.close()


def mcp_manager(config: Config) -> McpManager | None:
    """The MCP servers' manager, when the config enables one (the SDK is imported only then);
    a stdio server runs in the walls of the tools, with the environment tool processes get."""
    if not config.mcp.active():
        return None
    from hermes_gateway.mcp.link import Walls
    from hermes_gateway.mcp.manager import McpManager

    walls = Walls(config.workspace_path, tool_environment(config), config.mcp.max_message_bytes)
    return McpManager(config.mcp, walls)


def _llm_settings(config: Config, config_path: str | None = None) -> LLMSettings:
    m = config.model
    where = config_path or str(config.home_path / "config.yaml")
    hint = (
        f"No model is configured. Set model.api_key in {where} (or OPENAI_API_KEY in the "
        f"environment or {config.home_path / 'gateway.env'}), or point model.base_url at a local "
        "OpenAI-compatible server; `hermes config check` validates it."
    )
    return LLMSettings(
        base_url=m.base_url,
        api_key=m.api_key,
        model=m.name,
        timeout_s=m.timeout_s,
        max_retries=m.max_retries,
        stream=m.stream,
        temperature=m.temperature,
        redact=Redactor(config.secrets()),
        setup_hint=hint,
    )


def _vision_llm(config: Config, main: LLMClient) -> LLMClient:
    """The main client, unless `tools.vision` names another model or endpoint."""
    v, m = config.tools.vision, config.model
    if not (v.model or v.base_url or v.api_key):
        return main
    key = v.api_key or (m.api_key if not v.base_url else "")
    settings = replace(
        _llm_settings(config),
        base_url=v.base_url or m.base_url,
        api_key=key,
        model=v.model or m.name,
        temperature=None,
    )
    return LLMClient(settings)


def _tool_settings(config: Config) -> ToolSettings:
    t = config.tools
    return ToolSettings(
        home=config.home_path,
        terminal=TerminalSettings(
            timeout_s=t.terminal.timeout_s,
            max_timeout_s=t.terminal.max_timeout_s,
            approval=t.terminal.approval,
            approval_timeout_s=t.terminal.approval_timeout_s,
            env=tool_environment(config),
        ),
        web=WebSettings(
            search_url=t.web.search_url,
            timeout_s=t.web.timeout_s,
            max_bytes=t.web.max_bytes,
            max_redirects=t.web.max_redirects,
            allow_private=t.web.allow_private,
            allowed_networks=t.web.allowed_networks,
        ),
        vision_max_bytes=t.vision.max_bytes,
        memory_max_chars=t.memory_max_chars,
        memory_scope=config.memory.scope,
        search_timeout_s=t.search_timeout_s,
        max_write_bytes=t.max_write_bytes,
        code=CodeSettings(**t.execute_code.model_dump()),
        sections=t.sections(),  # what any other tool reads of its own (`ToolSettings.section`)
    )


_DB_SIDES = ("-wal", "-shm", "-journal")


def confine_tools(config: Config, config_path: str | None) -> None:
    """Hide the home (state.db, gateway.env, logs), the config file and the database's
    directory from every process a tool starts, wall them in; log how well this machine
    allows it."""
    private = [config.home_path]
    if config_path:
        private.append(Path(config_path))
    database = config.store_url.partition(":///")[2]
    if config.store_url.startswith("sqlite") and database:
        db = Path(database).absolute()
        # the write-ahead log and shared memory beside it hold recent messages too
        private += [db.parent, *(db.with_name(db.name + end) for end in ("", *_DB_SIDES))]
    terminal = config.tools.terminal
    detail = sandbox.setup(
        private,
        [Path(p) for p in terminal.hide_paths],
        writable=[Path(p) for p in terminal.writable_paths],
        network=terminal.network,
        tmp_mb=terminal.tmp_mb,
    )
    walls = sandbox.walls()
    # the network wall is the operator's to open (network: host); the others the kernel's
    complete = walls.writes and walls.hidden and (walls.network or terminal.network == "host")
    log.info(
        "sandbox.mode",
        mode=sandbox.current_mode(),
        detail=detail,
        walls_complete=complete,
        memory=memory_group.support().kind,
        memory_detail=memory_group.describe(),
    )
    if not complete:
        log.warning("sandbox.walls_missing", detail=sandbox.describe(walls))
