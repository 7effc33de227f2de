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
from typing import Any

import yaml
from pydantic import ValidationError

from hermes_gateway.config_schema import (
    PLATFORM_NAMES,
    ApiPlatformConfig,
    BusyPolicy,
    Config,
    ControlConfig,
    DelegateToolConfig,
    DiscordConfig,
    LoggingConfig,
    ModelConfig,
    PlatformsConfig,
    RunnerConfig,
    SlackConfig,
    StoreConfig,
    TelegramConfig,
    TerminalToolConfig,
    ToolsConfig,
    VisionToolConfig,
    WatchdogConfig,
    WebToolConfig,
)

__all__ = [
    "PLATFORM_NAMES",
    "ApiPlatformConfig",
    "BusyPolicy",
    "Config",
    "ControlConfig",
    "DelegateToolConfig",
    "DiscordConfig",
    "LoggingConfig",
    "ModelConfig",
    "PlatformsConfig",
    "RunnerConfig",
    "SlackConfig",
    "StoreConfig",
    "TelegramConfig",
    "TerminalToolConfig",
    "ToolsConfig",
    "VisionToolConfig",
    "WatchdogConfig",
    "WebToolConfig",
    "load_config",
    "systemd_notify_socket",
    "tool_environment",
]
from hermes_gateway.errors import ConfigError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


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


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
        # libyaml when present: much faster, and deep nesting stops at its depth limit in
        # milliseconds where the pure-Python loader recursed for a second
        loaded = yaml.load(text, Loader=_SAFE_LOADER)
    except RecursionError:
        raise ConfigError("", f"{path} nests too deeply to be a config") from None
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
    tools: dict[str, Any] = {}
    if config.tools.workspace:
        tools["workspace"] = str(Path(_expand_user(config.tools.workspace, env)).absolute())
    terminal = config.tools.terminal
    if terminal.hide_paths:
        hide = tuple(_expand_user(path, env) for path in terminal.hide_paths)
        tools["terminal"] = terminal.model_copy(update={"hide_paths": hide})
    if tools:
        updates["tools"] = config.tools.model_copy(update=tools)
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


# What every tool process may see of the gateway's environment: locale, time zone and the
# search path, nothing that could be a credential. Anything else is the operator's choice
# (`tools.terminal.env_passthrough`); HOME is set to the workspace by the tool.
_TOOL_ENV_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME"})


def tool_environment(config: Config, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment tool processes run with: an allow-list, never the gateway's whole one.

    Kept: PATH, LANG, LANGUAGE, LC_*, TZ, USER, LOGNAME, and the names listed in
    ``tools.terminal.env_passthrough`` (handed over as they are: the operator chose them).
    """
    env = os.environ if environ is None else environ
    listed = set(config.tools.terminal.env_passthrough)
    return {
        name: value
        for name, value in env.items()
        if name in _TOOL_ENV_NAMES or name.startswith("LC_") or name in listed
    }


def systemd_notify_socket(environ: Mapping[str, str] | None = None) -> str | None:
    """`$NOTIFY_SOCKET` when systemd started us with `Type=notify`."""
    env = os.environ if environ is None else environ
    return env.get("NOTIFY_SOCKET") or None
