"""The configuration schema: one frozen pydantic model per section of ``config.yaml``.

Pure data and validation; reading the file and the environment is `config.py`'s job.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from hermes_gateway.platform_spec import platform_specs
from tools.builtin import (
    DelegateToolConfig,
    ExecuteCodeToolConfig,
    TerminalToolConfig,
    VisionToolConfig,
    WebToolConfig,
)
from tools.catalog import tool_names, tool_sections, tool_specs

# an MCP server's environment variables whose values the log redactor hides
_SECRET_NAME = re.compile(r"token|key|secret|password|passwd|auth|credential", re.IGNORECASE)
BusyPolicy = Literal["interrupt", "queue", "latest", "collect", "steer"]
_S = TypeVar("_S", bound=BaseModel)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunnerConfig(_Section):
    # runs at once; "auto": what memory, `control.max_rss_bytes` and the open-file limit
    # allow (hermes_gateway/core/sizing.py, docs/concurrency.md)
    workers: int | None = Field(None, ge=1, le=4096)  # None: written "auto" (or null)
    # one user's (across their sessions) and one chat's runs going at once and waiting for
    # the pool; over the waiting cap a message is refused with a notice. 0: no cap
    max_running_per_user: int = Field(4, ge=0)
    max_waiting_per_user: int = Field(20, ge=0)
    max_running_per_chat: int = Field(32, ge=0)
    max_waiting_per_chat: int = Field(100, ge=0)
    busy_policy: BusyPolicy = "interrupt"
    queue_max: int = Field(20, ge=1)
    stop_grace_s: float = Field(5, ge=0)
    drain_timeout_s: float = Field(8, ge=0)
    group_sessions_per_user: bool = True
    max_input_chars: int = Field(100_000, ge=1)
    agent_cache_size: int = Field(256, ge=1)
    agent_idle_ttl_s: float = Field(3600, gt=0)

    @field_validator("workers", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        return None if value == "auto" else value


class StoreConfig(_Section):
    url: str | None = None  # sqlite+aiosqlite:///PATH or postgresql+asyncpg://...
    replay_max_age_s: float = Field(3600, ge=0)
    quarantine_after: int = Field(2, ge=1)
    probation_calm_s: float = Field(5, ge=0)
    inbox_retention_days: float = Field(7, ge=1)
    media_retention_days: float = Field(7, gt=0)


class ControlConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8642, ge=0, le=65535)
    token: str | None = None
    # bounds on what one client can hold: see docs/http-limits.md
    header_timeout_s: float = Field(10, gt=0)
    idle_timeout_s: float = Field(60, gt=0)
    body_timeout_s: float = Field(30, gt=0)
    max_connections: int = Field(1000, ge=1)
    max_body_bytes: int = Field(2 * 1024 * 1024, ge=1024)
    max_webhook_body_bytes: int = Field(256 * 1024, ge=1024)
    max_body_bytes_in_flight: int = Field(32 * 1024 * 1024, ge=1024)
    max_webhook_body_bytes_in_flight: int = Field(4 * 1024 * 1024, ge=1024)
    min_body_rate_bps: int = Field(4096, ge=0)  # 0: no floor
    body_grace_s: float = Field(2, ge=0)
    max_rss_bytes: int = Field(512 * 1024 * 1024, ge=0)  # 0: no ceiling
    rejection_log_interval_s: float = Field(10, gt=0)


class DashboardConfig(_Section):
    enabled: bool = True
    sample_interval_s: float = Field(5, ge=0.1, le=60)  # one hour of these is kept in memory
    push_interval_s: float = Field(2, ge=0.1, le=60)  # how often an open page is refreshed
    # a reverse proxy in front terminates TLS and says so in X-Forwarded-Proto: believe it
    trust_forwarded_proto: bool = False
    # the session cookie without Secure, so plain HTTP on a LAN address works (sniffable)
    insecure_cookie: bool = False


class ModelConfig(_Section):
    base_url: str = "https://api.openai.com/v1"
    api_key: str = ""
    name: str = "gpt-4o-mini"
    max_iterations: int = Field(20, ge=1)
    timeout_s: float = Field(120, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    stream: bool = True
    temperature: float | None = None
    # a system prompt rides along with every model call: 64 K characters is ~16 K tokens
    system_prompt: str = Field("", max_length=65_536)
    context_budget: int = Field(100_000, ge=0)  # tokens; 0 = never compact on its own
    # the model sees images: a message's images go to it as image parts of the user turn
    vision: bool = False
    vision_max_images: int = Field(4, ge=1, le=16)  # per turn; the rest only as a line
    vision_max_bytes: int = Field(5 * 1024 * 1024, ge=1024, le=20 * 1024 * 1024)  # per image


class Platforms(_Section):
    """``platforms:``: one section per installed platform (`platform_specs`), each typed by
    its spec's model; `PlatformsConfig` is this with those fields."""

    def enabled(self) -> list[str]:
        """The platforms to start, in a fixed order."""
        return [name for name in PLATFORM_NAMES if getattr(self, name).enabled]

    def section(self, name: str, kind: type[_S]) -> _S:
        """``platforms.<name>``, typed as its model ``kind`` (a platform reading its own)."""
        section = getattr(self, name)
        if not isinstance(section, kind):
            raise TypeError(f"platforms.{name} is a {type(section).__name__}, not {kind.__name__}")
        return section


def _platforms_model() -> type[Platforms]:
    fields: dict[str, Any] = {
        spec.name: (spec.section, Field(default_factory=spec.section)) for spec in platform_specs()
    }
    return create_model("PlatformsConfig", __base__=Platforms, **fields)


PLATFORM_NAMES = tuple(spec.name for spec in platform_specs())
if TYPE_CHECKING:
    PlatformsConfig = Platforms
else:
    PlatformsConfig = _platforms_model()


class Tools(_Section):
    """``tools:``: the keys of the toolset itself, and one section per installed tool that
    has settings (`tools.catalog.tool_sections`), typed by its spec's model; `ToolsConfig` is
    this with those fields."""

    if TYPE_CHECKING:  # the built-in sections the gateway itself reads (made from the specs)
        terminal: TerminalToolConfig = Field(default_factory=TerminalToolConfig)
        web: WebToolConfig = Field(default_factory=WebToolConfig)
        vision: VisionToolConfig = Field(default_factory=VisionToolConfig)
        delegate: DelegateToolConfig = Field(default_factory=DelegateToolConfig)
        execute_code: ExecuteCodeToolConfig = Field(default_factory=ExecuteCodeToolConfig)

    workspace: str | None = None  # default: <home>/workspace
    # local and confined to the workspace and home by default; terminal, web, vision and
    # delegation reach further and are switched on by the operator
    enabled: tuple[str, ...] = (
        "read_file",
        "write_file",
        "patch",
        "search_files",
        "memory",
        "session_search",
        "skills_list",
        "skill_view",
        "skill_manage",
    )
    platforms: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # per-platform enabled
    max_output_chars: int = Field(50_000, ge=100)
    parallel_workers: int = Field(4, ge=1, le=64)
    memory_max_chars: int = Field(50_000, ge=1000)
    search_timeout_s: float = Field(20, gt=0)  # a regex search's child is killed after it
    max_write_bytes: int = Field(1024 * 1024, ge=1024)  # write_file content, patch edit text

    @field_validator("enabled")
    @classmethod
    def _known_tools(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        _check_tool_names(value)
        return value

    @field_validator("platforms")
    @classmethod
    def _known_platforms(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for name, tools in value.items():
            if name not in PLATFORM_NAMES:
                raise ValueError(f"unknown platform {name!r} (one of {', '.join(PLATFORM_NAMES)})")
            _check_tool_names(tools)
        return value

    def enabled_for(self, platform: str) -> tuple[str, ...]:
        """The tools a session on ``platform`` may use."""
        return self.platforms.get(platform, self.enabled)

    def sections(self) -> dict[str, BaseModel]:
        """Every tool's section, by key (what `tools.catalog.ToolSettings.sections` holds)."""
        return {key: value for key, value in self if isinstance(value, BaseModel)}


def _tools_model(sections: tuple[tuple[str, type[BaseModel]], ...]) -> type[Tools]:
    clash = [key for key, _ in sections if key in Tools.model_fields]
    if clash:
        raise RuntimeError(f"a tool's section is named like a key of tools: {clash[0]!r}")
    fields: dict[str, Any] = {key: (kind, Field(default_factory=kind)) for key, kind in sections}
    return create_model("ToolsConfig", __base__=Tools, **fields)


_SECTIONS_AT_IMPORT = tuple(tool_sections().items())
if TYPE_CHECKING:
    ToolsConfig = Tools
else:
    ToolsConfig = _tools_model(_SECTIONS_AT_IMPORT)


def _url_password(url: str | None) -> str:
    """The password in ``scheme://user:password@host``, or ""."""
    if not url or "@" not in url or "://" not in url:
        return ""
    credentials = url.split("://", 1)[1].rsplit("@", 1)[0]
    return credentials.split(":", 1)[1] if ":" in credentials else credentials


def _check_tool_names(names: tuple[str, ...]) -> None:
    known = tool_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown tool {unknown[0]!r} (installed tools: {', '.join(known)})")


class McpToolFilter(_Section):
    include: tuple[str, ...] = ()  # shell-style patterns of the server's tool names; empty = all
    exclude: tuple[str, ...] = ()


class McpServerConfig(_Section):
    """One MCP server (docs/mcp.md): a command run over stdio, or a streamable HTTP URL."""

    enabled: bool = True
    command: str = ""  # stdio: run inside the tools' walls
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)  # added to what tool processes get
    cwd: str = ""  # default: the tools' workspace
    url: str = ""  # streamable HTTP
    headers: dict[str, str] = Field(default_factory=dict)  # ${VAR} keeps secrets out of the file
    tools: McpToolFilter = McpToolFilter()
    timeout_s: float = Field(60, gt=0)  # one call
    connect_timeout_s: float = Field(30, gt=0)  # start, initialize and list
    eager: bool = False  # started with the gateway, not at its first use
    # off, always, or the server's tool names that ask the user first
    approval: Literal["off", "always"] | tuple[str, ...] = "off"
    platforms: tuple[str, ...] = ()  # empty: every platform
    chats: tuple[str, ...] = ()  # session keys or prefixes (``telegram:dm:42``); empty: all
    max_tools: int = Field(64, ge=1, le=512)
    memory_mb: int = Field(2048, ge=0)  # a stdio server's address space; 0 = unlimited
    max_processes: int = Field(64, ge=1)
    open_files: int = Field(256, ge=16)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("give a server either command (stdio) or url (streamable HTTP)")
        return self


class McpConfig(_Section):
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024)  # one message from a server

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        bad = [name for name in value if not re.fullmatch(r"[a-z0-9][a-z0-9_]{0,23}", name)]
        if bad:
            raise ValueError(
                f"server name {bad[0]!r}: lower-case letters, digits and _ (at most 24)"
            )
        return value

    def active(self) -> dict[str, McpServerConfig]:
        return {name: server for name, server in self.servers.items() if server.enabled}


class SchedulerConfig(_Section):
    """Scheduled jobs (docs/scheduler.md); off unless enabled."""

    enabled: bool = False
    timezone: str = ""  # IANA zone of jobs that name none; empty = the host's
    max_parallel: int = Field(2, ge=1, le=256)  # job runs at once (one pool thread stays free)
    run_timeout_s: float = Field(600, gt=0)  # wall clock of one run; a job may set its own
    tick_s: float = Field(5, gt=0, le=60)
    lease_s: float = Field(60, ge=2)  # a run whose claimer stopped renewing is abandoned
    grace_max_s: float = Field(3600, ge=0)  # a late slot runs within min(period / 2, this)
    catch_up: Literal["one", "skip"] = "one"  # past the grace: one catch-up run, or none
    min_interval_s: float = Field(60, ge=1)  # the shortest `every ...` a job may ask for
    max_jobs_per_chat: int = Field(50, ge=1)
    allow_jobs_from_jobs: bool = False  # may a job's own run create jobs

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        if value:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown time zone {value!r} (an IANA name)") from None
        return value


class EmbeddingsConfig(_Section):
    base_url: str = ""  # empty = model.base_url
    api_key: str = ""  # empty = model.api_key when base_url is empty too
    model: str = "text-embedding-3-small"
    batch_size: int = Field(64, ge=1, le=2048)  # texts per request
    timeout_s: float = Field(30, gt=0)
    outage_pause_s: float = Field(60, ge=0)  # after a failure, keywords only for this long


class MemoryConfig(_Section):
    scope: Literal["user", "shared"] = "user"  # MEMORY.md and archive bank per user, or one
    extract: bool = False  # retain: one model call turns the text into separate facts
    auto_retain: bool = False  # every completed turn is retained in the background
    recall_limit: int = Field(8, ge=1, le=50)  # reflect and auto-retain's recall size
    token_budget: int = Field(1500, ge=100)  # recall's answer is trimmed to about this
    embeddings: EmbeddingsConfig = EmbeddingsConfig()


class TranscriptionConfig(_Section):
    enabled: bool = False  # voice notes and audio files become text before the model sees them
    base_url: str = ""  # empty = model.base_url
    api_key: str = ""  # empty = model.api_key when base_url is empty too
    model: str = "whisper-1"
    max_bytes: int = Field(10 * 1024 * 1024, ge=1024, le=20 * 1024 * 1024)
    max_seconds: float = Field(300, gt=0)  # longer notes stay an attachment line
    timeout_s: float = Field(60, gt=0)


class MediaConfig(_Section):
    transcription: TranscriptionConfig = TranscriptionConfig()


class WatchdogConfig(_Section):
    interval_ms: int = Field(200, ge=10)
    warn_ms: int = Field(250, ge=1)
    fatal_s: float = Field(60, gt=0)


class ClusterConfig(_Section):
    redis_url: str | None = (
        None  # redis://HOST:PORT/DB, rediss://..., unix:///PATH; None = one process
    )
    instance_id: str = Field("", max_length=128)  # empty = host name + pid
    lease_s: float = Field(10, ge=1, le=300)
    waiting_notice_s: float = Field(30, ge=1, le=3600)  # a message waiting for Redis: told
    # where the other instances reach this one's control server (a local API request for a
    # session this instance runs is carried here); empty = http://<control.host>:<port>
    peer_url: str = Field("", max_length=512)


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console", "auto"] = "auto"
    file: bool = True
    max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    backups: int = Field(5, ge=0)


class TracesConfig(_Section):
    """OpenTelemetry traces over OTLP/HTTP (docs/traces.md); off, nothing of the SDK loads."""

    enabled: bool = False
    endpoint: str = "http://127.0.0.1:4318/v1/traces"
    headers: dict[str, str] = Field(default_factory=dict)  # ${VAR} keeps secrets out of the file
    sample_ratio: float = Field(1.0, ge=0, le=1)
    service_name: str = "hermes-gateway"
    resource: dict[str, str] = Field(default_factory=dict)  # more resource attributes
    session_key: Literal["hashed", "omitted"] = "hashed"
    # spans waiting for export at most; past it they are dropped (and counted), not kept
    queue_max: int = Field(2048, ge=1)
    batch_max: int = Field(512, ge=1)
    export_timeout_s: float = Field(5, gt=0)
    schedule_delay_s: float = Field(2, gt=0)


class ObservabilityConfig(_Section):
    traces: TracesConfig = TracesConfig()


class Config(_Section):
    home: str = "~/.hermes"
    runner: RunnerConfig = RunnerConfig()
    store: StoreConfig = StoreConfig()
    control: ControlConfig = ControlConfig()
    dashboard: DashboardConfig = DashboardConfig()
    model: ModelConfig = ModelConfig()
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)
    tools: ToolsConfig = ToolsConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    memory: MemoryConfig = MemoryConfig()
    media: MediaConfig = MediaConfig()
    watchdog: WatchdogConfig = WatchdogConfig()
    logging: LoggingConfig = LoggingConfig()
    cluster: ClusterConfig = ClusterConfig()
    mcp: McpConfig = McpConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    hooks: tuple[str, ...] = ()
    hook_timeout_s: float = Field(5, gt=0)

    @property
    def home_path(self) -> Path:
        return Path(self.home)

    @property
    def store_url(self) -> str:
        return self.store.url or f"sqlite+aiosqlite:///{self.home_path / 'state.db'}"

    @property
    def workspace_path(self) -> Path:
        return Path(self.tools.workspace) if self.tools.workspace else self.home_path / "workspace"

    def busy_policy_for(self, platform: str) -> str:
        """The busy policy of ``platform``'s sessions: its section's own `busy_policy` where it
        has one (the local API's), else `runner.busy_policy`."""
        own = getattr(getattr(self.platforms, platform, None), "busy_policy", "runner")
        return self.runner.busy_policy if own in (None, "runner") else str(own)

    def secrets(self) -> list[str]:
        """Every secret value in the config, for the log redactor."""
        values = [
            self.model.api_key,
            self.control.token or "",
            self.memory.embeddings.api_key,
            self.media.transcription.api_key,
            _url_password(self.cluster.redis_url),
        ]
        for spec in platform_specs():
            section = getattr(self.platforms, spec.name)
            values += [str(getattr(section, key)) for key in spec.secrets]
            values += spec.secret_values(section)
        for tool in tool_specs():
            own = getattr(self.tools, tool.section or "", None)
            values += [str(getattr(own, key)) for key in tool.secrets if own is not None]
        for server in self.mcp.servers.values():
            values += [v for k, v in server.env.items() if _SECRET_NAME.search(k)]
            values += server.headers.values()
        values += self.observability.traces.headers.values()
        return [v for v in values if v and len(v) >= 4]


@functools.cache
def _config_with(sections: tuple[tuple[str, type[BaseModel]], ...]) -> type[Config]:
    tools = _tools_model(sections)
    return create_model("Config", __base__=Config, tools=(tools, Field(default_factory=tools)))


def config_model() -> type[Config]:
    """The model a config file is validated with: `Config`, or, when a tool was installed
    since this module was imported (a test putting one on the path), `Config` with its
    section."""
    sections = tuple(tool_sections().items())
    return Config if sections == _SECTIONS_AT_IMPORT else _config_with(sections)
