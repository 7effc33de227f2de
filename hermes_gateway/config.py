"""The one configuration object: YAML + ``${VAR}`` interpolation, validated by pydantic at load.

This is the only module that reads the environment. `load_config` runs once at start and the
resulting frozen `Config` is passed down explicitly.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hermes_gateway.errors import ConfigError

BusyPolicy = Literal["interrupt", "queue", "latest", "collect", "steer"]
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunnerConfig(_Section):
    workers: int = Field(8, ge=1, le=1024)
    busy_policy: BusyPolicy = "interrupt"
    queue_max: int = Field(20, ge=1)
    stop_grace_s: float = Field(5, ge=0)
    drain_timeout_s: float = Field(8, ge=0)
    group_sessions_per_user: bool = True
    max_input_chars: int = Field(100_000, ge=1)
    agent_cache_size: int = Field(256, ge=1)
    agent_idle_ttl_s: float = Field(3600, gt=0)


class StoreConfig(_Section):
    url: str | None = None
    replay_max_age_s: float = Field(3600, ge=0)
    inbox_retention_days: float = Field(7, ge=1)


class ControlConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8642, ge=0, le=65535)
    token: str | None = None


class ModelConfig(_Section):
    base_url: str = "https://api.openai.com/v1"
    api_key: str = ""
    name: str = "gpt-4o-mini"
    max_iterations: int = Field(20, ge=1)
    timeout_s: float = Field(120, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    stream: bool = True
    temperature: float | None = None
    system_prompt: str = ""
    context_budget: int = Field(100_000, ge=0)  # tokens; 0 = never compact on its own


class _PlatformBase(_Section):
    enabled: bool = False
    allowed_users: tuple[str, ...] = ()
    allow_all: bool = False
    require_mention: bool = True
    pairing: bool = False  # unknown DM users get a code an operator approves
    typing: bool = True  # show "typing..." (or the platform's equivalent) while working
    streaming: bool = False  # live preview of the answer by message edits

    @field_validator("allowed_users", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        # ids arrive as numbers or strings in YAML; compare them as strings everywhere
        if isinstance(value, list | tuple):
            return tuple(str(v).strip() for v in value)
        return value


class TelegramConfig(_PlatformBase):
    token: str = ""
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str = ""  # public URL Telegram posts to (webhook mode)
    webhook_secret: str = ""  # checked against X-Telegram-Bot-Api-Secret-Token
    webhook_path: str = "/telegram/webhook"  # route on the control server
    media_max_bytes: int = Field(20 * 1024 * 1024, ge=0)


class DiscordConfig(_PlatformBase):
    token: str = ""
    api_base: str = "https://discord.com/api/v10"
    gateway_url: str = "wss://gateway.discord.gg"
    allow_bots: bool = False
    sync_commands: bool = True  # register the gateway commands as slash commands at start
    guild_ready_timeout_s: float = Field(2, ge=0)  # wait for guild data before READY counts
    identify_delay_s: float = Field(5, ge=0)  # pause before a re-IDENTIFY (Discord: 1 per 5 s)


class SlackConfig(_PlatformBase):
    mode: Literal["socket", "http"] = "socket"
    bot_token: str = ""
    app_token: str = ""
    signing_secret: str = ""
    events_path: str = "/slack/events"
    api_base: str = "https://slack.com/api/"
    message_limit: int = Field(3900, ge=100, le=39000)
    progress: Literal["reaction", "status", "none"] = "reaction"
    progress_reaction: str = "eyes"
    ping_interval_s: float = Field(10, gt=0)  # Socket Mode ping; a dead socket is noticed after it


class ApiPlatformConfig(_Section):
    enabled: bool = True


class PlatformsConfig(_Section):
    api: ApiPlatformConfig = ApiPlatformConfig()
    telegram: TelegramConfig = TelegramConfig()
    discord: DiscordConfig = DiscordConfig()
    slack: SlackConfig = SlackConfig()


class TerminalToolConfig(_Section):
    timeout_s: float = Field(60, gt=0)
    max_timeout_s: float = Field(600, gt=0)
    approval: Literal["off", "dangerous", "always"] = "dangerous"
    approval_timeout_s: float = Field(120, gt=0)


class WebToolConfig(_Section):
    search_url: str = ""  # SearXNG-compatible; empty = web_search unavailable
    timeout_s: float = Field(20, gt=0)
    max_bytes: int = Field(2_000_000, ge=1024)
    max_redirects: int = Field(5, ge=0, le=20)
    allow_private: bool = False
    allowed_networks: tuple[str, ...] = ()

    @field_validator("search_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or CIDR network") from None
        return value


class VisionToolConfig(_Section):
    model: str = ""  # empty = model.name
    base_url: str = ""  # empty = model.base_url
    api_key: str = ""  # empty = model.api_key when base_url is empty too
    max_bytes: int = Field(10 * 1024 * 1024, ge=1024)


class DelegateToolConfig(_Section):
    max_depth: int = Field(1, ge=1, le=5)
    max_iterations: int = Field(10, ge=1)


class ToolsConfig(_Section):
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
    terminal: TerminalToolConfig = TerminalToolConfig()
    web: WebToolConfig = WebToolConfig()
    vision: VisionToolConfig = VisionToolConfig()
    delegate: DelegateToolConfig = DelegateToolConfig()

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


PLATFORM_NAMES = ("api", "telegram", "discord", "slack")


def _check_tool_names(names: tuple[str, ...]) -> None:
    from tools.catalog import BUILTIN_NAMES

    unknown = [n for n in names if n not in BUILTIN_NAMES]
    if unknown:
        raise ValueError(
            f"unknown tool {unknown[0]!r} (built-in tools: {', '.join(BUILTIN_NAMES)})"
        )


class WatchdogConfig(_Section):
    interval_ms: int = Field(200, ge=10)
    warn_ms: int = Field(250, ge=1)
    fatal_s: float = Field(60, gt=0)


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console", "auto"] = "auto"
    file: bool = True
    max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    backups: int = Field(5, ge=0)


class Config(_Section):
    home: str = "~/.hermes"
    runner: RunnerConfig = RunnerConfig()
    store: StoreConfig = StoreConfig()
    control: ControlConfig = ControlConfig()
    model: ModelConfig = ModelConfig()
    platforms: PlatformsConfig = PlatformsConfig()
    tools: ToolsConfig = ToolsConfig()
    watchdog: WatchdogConfig = WatchdogConfig()
    logging: LoggingConfig = LoggingConfig()
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

    def secrets(self) -> list[str]:
        """Every secret value in the config, for the log redactor."""
        p = self.platforms
        values = [
            self.model.api_key,
            self.control.token or "",
            p.telegram.token,
            p.discord.token,
            p.slack.bot_token,
            p.slack.app_token,
            p.slack.signing_secret,
            p.telegram.webhook_secret,
            self.tools.vision.api_key,
        ]
        return [v for v in values if v and len(v) >= 4]


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate the config; raise `ConfigError` naming the key.

    Precedence: ``path``, else ``$HERMES_HOME/config.yaml``, else built-in defaults.
    ``HERMES_HOME`` overrides ``home``.
    """
    env = dict(os.environ if environ is None else environ)
    try:
        raw = _read_yaml(path, env)
        data = _interpolate(raw, env, "", [MAX_VALUES])
    except RecursionError:
        raise ConfigError("", "the config nests too deeply or refers to itself") from None
    if not isinstance(data, dict):
        raise ConfigError("", "the config file must be a mapping of keys")
    data.setdefault("model", {})
    if isinstance(data["model"], dict) and "api_key" not in data["model"]:
        data["model"]["api_key"] = env.get("OPENAI_API_KEY", "")
    _default_platform_secrets(data, env)
    if env.get("HERMES_HOME"):
        data["home"] = env["HERMES_HOME"]
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc) from None
    config = _expand_paths(config, env)
    _check_semantics(config)
    return config


def _read_yaml(path: str | Path | None, env: Mapping[str, str]) -> Any:
    if path is None:
        home = env.get("HERMES_HOME")
        candidate = Path(_expand_user(home, env)) / "config.yaml" if home else None
        if candidate is None or not candidate.exists():
            return {}
        path = candidate
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"{path} is not UTF-8 text (byte {exc.start})") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError("", f"{path} is not valid YAML{where}") from None
    return {} if loaded is None else loaded


MAX_VALUES = 100_000  # YAML aliases can make a few lines expand to billions of values


def _interpolate(value: Any, env: Mapping[str, str], key: str, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError("", f"the config holds more than {MAX_VALUES} values (YAML aliases?)")
    if isinstance(value, str):
        return _substitute(value, env, key)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{key}.{k}".lstrip("."), "keys must be strings")
            out[k] = _interpolate(v, env, f"{key}.{k}".lstrip("."), budget)
        return out
    if isinstance(value, list):
        return [_interpolate(v, env, f"{key}[{i}]", budget) for i, v in enumerate(value)]
    return value


def _substitute(text: str, env: Mapping[str, str], key: str) -> str:
    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env and (env[name] or default is None):
            return env[name]
        if default is not None:
            return default
        raise ConfigError(key, f"environment variable {name} is not set")

    return _ENV_REF.sub(repl, text)


def _default_platform_secrets(data: dict[str, Any], env: Mapping[str, str]) -> None:
    # The DESIGN defaults read these variables; apply them when the file omits the key.
    defaults = {
        "telegram": {"token": "TELEGRAM_BOT_TOKEN"},
        "discord": {"token": "DISCORD_BOT_TOKEN"},
        "slack": {
            "bot_token": "SLACK_BOT_TOKEN",
            "app_token": "SLACK_APP_TOKEN",
            "signing_secret": "SLACK_SIGNING_SECRET",
        },
    }
    platforms = data.setdefault("platforms", {})
    if not isinstance(platforms, dict):
        return
    for name, keys in defaults.items():
        section = platforms.get(name)
        if section is None:
            section = platforms[name] = {}
        if not isinstance(section, dict):
            continue
        for key, var in keys.items():
            if key not in section and env.get(var):
                section[key] = env[var]


def _expand_user(path: str, env: Mapping[str, str]) -> str:
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or str(Path.home())
        return home + path[1:]
    return path


def _expand_paths(config: Config, env: Mapping[str, str]) -> Config:
    home = Path(_expand_user(config.home, env)).absolute()
    updates: dict[str, Any] = {"home": str(home)}
    if config.tools.workspace:
        workspace = Path(_expand_user(config.tools.workspace, env)).absolute()
        updates["tools"] = config.tools.model_copy(update={"workspace": str(workspace)})
    return config.model_copy(update=updates)


def _check_semantics(config: Config) -> None:
    p = config.platforms
    required = [
        (p.telegram.enabled, "platforms.telegram.token", p.telegram.token, "TELEGRAM_BOT_TOKEN"),
        (p.discord.enabled, "platforms.discord.token", p.discord.token, "DISCORD_BOT_TOKEN"),
        (p.slack.enabled, "platforms.slack.bot_token", p.slack.bot_token, "SLACK_BOT_TOKEN"),
        (
            p.slack.enabled and p.slack.mode == "socket",
            "platforms.slack.app_token",
            p.slack.app_token,
            "SLACK_APP_TOKEN",
        ),
        (
            p.slack.enabled and p.slack.mode == "http",
            "platforms.slack.signing_secret",
            p.slack.signing_secret,
            "SLACK_SIGNING_SECRET",
        ),
    ]
    for enabled, key, value, var in required:
        if enabled and not value.strip():
            platform = key.split(".")[1]
            raise ConfigError(
                key, f"must be set when platforms.{platform}.enabled is true (or set {var})"
            )
    if not _is_loopback(config.control.host) and not config.control.token:
        raise ConfigError(
            "control.token", "must be set when control.host is not a loopback address"
        )
    tg = p.telegram
    if tg.enabled and tg.mode == "webhook":
        if not tg.webhook_url:
            raise ConfigError("platforms.telegram.webhook_url", "must be set in webhook mode")
        if not tg.webhook_secret:
            raise ConfigError("platforms.telegram.webhook_secret", "must be set in webhook mode")
    if config.watchdog.fatal_s * 1000 <= config.watchdog.warn_ms:
        raise ConfigError("watchdog.fatal_s", "must be longer than watchdog.warn_ms")


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _config_error(exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    key = ".".join(str(part) for part in err["loc"])
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        reason = "unknown key"
    elif kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        reason = "must be one of " + ", ".join(choices)
    elif kind == "missing":
        reason = "is required"
    else:
        reason = err["msg"][0].lower() + err["msg"][1:]
        if "input" in err and not isinstance(err["input"], dict | list):
            reason += f" (got {err['input']!r})"
    return ConfigError(key, reason)


# Never handed to a tool's shell: the service's own plumbing, and anything named like a secret.
_PRIVATE_VARS = frozenset({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS"})
_SECRET_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "API_KEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
)
_URL_PASSWORD = re.compile(r"://[^/\s:@]+:[^/\s@]+@")  # postgres://user:pw@host


def tool_environment(config: Config, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment `terminal` commands run with: the gateway's, less its secrets (issue 6).

    Dropped: variables named like secrets (``*_TOKEN``, ``*_KEY``, ``*_SECRET``, passwords,
    credentials), URLs with a password in them, systemd's notify/watchdog plumbing, and any
    variable whose value holds a secret from the config (``model.api_key``, platform tokens).
    """
    env = os.environ if environ is None else environ
    secrets = config.secrets()
    kept = {}
    for name, value in env.items():
        upper = name.upper()
        if upper in _PRIVATE_VARS or upper.endswith("_KEY"):
            continue
        if any(word in upper for word in _SECRET_WORDS):
            continue
        if any(secret in value for secret in secrets) or _URL_PASSWORD.search(value):
            continue
        kept[name] = value
    return kept


def systemd_notify_socket(environ: Mapping[str, str] | None = None) -> str | None:
    """`$NOTIFY_SOCKET` when systemd started us with `Type=notify`."""
    env = os.environ if environ is None else environ
    return env.get("NOTIFY_SOCKET") or None
