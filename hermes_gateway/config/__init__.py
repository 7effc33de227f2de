"""The one configuration object: YAML + ``${VAR}`` interpolation, validated by pydantic at load.

This is the only module that reads the environment (the file is read by `config_file`, checked
by `config_check`). `load_config` runs once at start and the frozen `Config` is passed down.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hermes_gateway.config.otel import otel_defaults
from hermes_gateway.config.schema import (
    PLATFORM_NAMES,
    BusyPolicy,
    Config,
    ControlConfig,
    LoggingConfig,
    ModelConfig,
    Platforms,
    PlatformsConfig,
    RunnerConfig,
    StoreConfig,
    ToolsConfig,
    WatchdogConfig,
    config_model,
)
from tools.builtin import (
    DelegateToolConfig,
    TerminalToolConfig,
    VisionToolConfig,
    WebToolConfig,
)

__all__ = [
    "MAX_CONFIG_BYTES",
    "PLATFORM_NAMES",
    "BusyPolicy",
    "Config",
    "ControlConfig",
    "DelegateToolConfig",
    "LoggingConfig",
    "ModelConfig",
    "Platforms",
    "PlatformsConfig",
    "RunnerConfig",
    "StoreConfig",
    "TerminalToolConfig",
    "ToolsConfig",
    "VisionToolConfig",
    "WatchdogConfig",
    "WebToolConfig",
    "config_path",
    "load_config",
    "read_env_file",
    "reload_changes",
    "systemd_notify_socket",
    "tool_environment",
]
from hermes_gateway.config.check import check_semantics, config_error
from hermes_gateway.config.file import MAX_CONFIG_BYTES, read_yaml
from hermes_gateway.errors import ConfigError
from hermes_gateway.platform_spec import platform_specs

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate the config; raise `ConfigError` naming the key.

    Precedence: ``path``, else ``$HERMES_HOME/config.yaml`` (``~/.hermes`` when unset), else
    built-in defaults. ``HERMES_HOME`` overrides ``home``. ``${VAR}`` is looked up in the
    environment, then in ``<home>/gateway.env``.
    """
    env = dict(os.environ if environ is None else environ)
    try:
        raw = read_yaml(config_path(path, env))
        # the secrets file systemd's unit reads: every command (`config check`, `chat`,
        # `doctor`, a foreground run) sees it too; the real environment wins
        env = {**read_env_file(_home_of(raw, env) / "gateway.env"), **env}
        data = _interpolate(raw, env, "", [MAX_VALUES])
    except RecursionError:
        raise ConfigError("", "the config nests too deeply or refers to itself") from None
    if not isinstance(data, dict):
        raise ConfigError("", "the config file must be a mapping of keys")
    data.setdefault("model", {})
    if isinstance(data["model"], dict) and "api_key" not in data["model"]:
        data["model"]["api_key"] = env.get("OPENAI_API_KEY", "")
    _default_platform_secrets(data, env)
    otel_defaults(data, env)
    if env.get("HERMES_HOME"):
        data["home"] = env["HERMES_HOME"]
    try:
        config = config_model().model_validate(data)
    except ValidationError as exc:
        raise config_error(exc) from None
    config = _expand_paths(config, env)
    check_semantics(config)
    return config


DEFAULT_HOME = "~/.hermes"


def config_path(path: str | Path | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The file `load_config` reads: ``path``, else ``<home>/config.yaml`` when it exists."""
    if path is not None:
        return Path(path)
    env = os.environ if environ is None else environ
    candidate = Path(_expand_user(env.get("HERMES_HOME") or DEFAULT_HOME, env)) / "config.yaml"
    return candidate if candidate.exists() else None


def _home_of(raw: Any, env: Mapping[str, str]) -> Path:
    home = env.get("HERMES_HOME")
    if not home and isinstance(raw, dict) and isinstance(raw.get("home"), str):
        home = raw["home"] if "${" not in raw["home"] else None
    return Path(_expand_user(home or DEFAULT_HOME, env))


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines as systemd's ``EnvironmentFile=`` reads them (comments with # or ;,
    optional quotes, an ``export`` prefix tolerated); a missing file is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name] = value
    return out


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
    # each platform's spec names the variables its secrets default to when the file omits them
    platforms = data.setdefault("platforms", {})
    if not isinstance(platforms, dict):
        return
    for spec in platform_specs():
        defaults = {key: var for key, var in spec.secrets.items() if var}
        if not defaults:
            continue
        section = platforms.get(spec.name)
        if section is None:
            section = platforms[spec.name] = {}
        if not isinstance(section, dict):
            continue
        for key, var in defaults.items():
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
    if terminal.hide_paths or terminal.writable_paths:
        paths = {
            key: tuple(_expand_user(path, env) for path in getattr(terminal, key))
            for key in ("hide_paths", "writable_paths")
        }
        tools["terminal"] = terminal.model_copy(update=paths)
    if tools:
        updates["tools"] = config.tools.model_copy(update=tools)
    return config.model_copy(update=updates)


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


# What SIGHUP takes without a restart: who may talk to the bot, and the log level.
RELOADABLE = frozenset({"allowed_users", "allow_all", "require_mention", "pairing"})


def reload_changes(old: Config, new: Config) -> tuple[list[str], list[str]]:
    """The keys that differ between two configs, split into (taken by SIGHUP, need a restart)."""
    changed = _diff(old.model_dump(), new.model_dump(), "")
    taken = [k for k in changed if k == "logging.level" or _reloadable_platform_key(k)]
    return taken, [k for k in changed if k not in taken]


def _reloadable_platform_key(key: str) -> bool:
    parts = key.split(".")
    return len(parts) == 3 and parts[0] == "platforms" and parts[2] in RELOADABLE


def _diff(old: Any, new: Any, key: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(old.keys() | new.keys()):
            out += _diff(old.get(k), new.get(k), f"{key}.{k}".lstrip("."))
        return out
    return [] if old == new else [key]


def desktop_display(environ: Mapping[str, str] | None = None) -> bool:
    """A graphical session is there to open a browser in (`hermes dashboard`)."""
    env = os.environ if environ is None else environ
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def systemd_notify_socket(environ: Mapping[str, str] | None = None) -> str | None:
    """`$NOTIFY_SOCKET` when systemd started us with `Type=notify`."""
    env = os.environ if environ is None else environ
    return env.get("NOTIFY_SOCKET") or None
