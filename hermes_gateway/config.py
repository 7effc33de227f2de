"""The one configuration object: YAML + ``${VAR}`` interpolation, validated by pydantic at load.

This is the only module that reads the environment. `load_config` runs once at start and the
resulting frozen `Config` is passed down explicitly.
"""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from hermes_gateway.config_schema import (
    PLATFORM_NAMES,
    BusyPolicy,
    Config,
    ControlConfig,
    DelegateToolConfig,
    LoggingConfig,
    ModelConfig,
    Platforms,
    PlatformsConfig,
    RunnerConfig,
    StoreConfig,
    TerminalToolConfig,
    ToolsConfig,
    VisionToolConfig,
    WatchdogConfig,
    WebToolConfig,
)

__all__ = [
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
        raw = _read_yaml(path, env)
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
    if env.get("HERMES_HOME"):
        data["home"] = env["HERMES_HOME"]
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc) from None
    config = _expand_paths(config, env)
    _check_semantics(config)
    return config


DEFAULT_HOME = "~/.hermes"
MAX_CONFIG_BYTES = 1024 * 1024  # a real config is a few KB; /dev/zero or a 50 MB file is not


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser when present (deep nesting stops at its depth limit in milliseconds
    where the pure-Python loader recursed for a second), with duplicate keys refused: YAML
    would keep the last one silently, and a second ``token:`` is usually a paste mistake."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` may be overridden by the mapping's own keys
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(str(key), seen[key], line)
                seen[key] = line
            except TypeError:
                pass  # an unhashable key: the constructor below names it
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


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


def _read_yaml(path: str | Path | None, env: Mapping[str, str]) -> Any:
    path = config_path(path, env)
    if path is None:
        return {}
    text = _read_text(Path(path))
    try:
        loaded = yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as exc:
        raise ConfigError(
            exc.key, f"appears twice in the same mapping (lines {exc.first} and {exc.second})"
        ) from None
    except RecursionError:
        raise ConfigError("", f"{path} nests too deeply to be a config") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError("", f"{path} is not valid YAML{where}") from None
    return {} if loaded is None else loaded


def _read_text(path: Path) -> str:
    """The file's text, read no further than `MAX_CONFIG_BYTES` (a device or a huge file
    must not take seconds and gigabytes before it is refused)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError("", f"{path} is larger than {MAX_CONFIG_BYTES // 1024} KiB: not a config")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"{path} is not UTF-8 text (byte {exc.start})") from None


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
    if terminal.hide_paths:
        hide = tuple(_expand_user(path, env) for path in terminal.hide_paths)
        tools["terminal"] = terminal.model_copy(update={"hide_paths": hide})
    if tools:
        updates["tools"] = config.tools.model_copy(update=tools)
    return config.model_copy(update=updates)


def _check_semantics(config: Config) -> None:
    enabled = [
        (spec, getattr(config.platforms, spec.name))
        for spec in platform_specs()
        if getattr(config.platforms, spec.name).enabled
    ]
    for spec, section in enabled:
        for key in spec.required(section):
            if not str(getattr(section, key)).strip():
                var = spec.secrets.get(key)
                raise ConfigError(
                    f"platforms.{spec.name}.{key}",
                    f"must be set when platforms.{spec.name}.enabled is true"
                    + (f" (or set {var})" if var else ""),
                )
    _check_control_token(config)
    _check_store_url(config.store.url)
    for spec, section in enabled:
        for key, reason in spec.problems(section):
            raise ConfigError(f"platforms.{spec.name}.{key}", reason)
    _check_redis_url(config.cluster.redis_url)
    if config.watchdog.fatal_s * 1000 <= config.watchdog.warn_ms:
        raise ConfigError("watchdog.fatal_s", "must be longer than watchdog.warn_ms")


MIN_TOKEN_CHARS = 16


def _check_control_token(config: Config) -> None:
    token = config.control.token
    if _is_loopback(config.control.host):
        return
    if not token:
        raise ConfigError(
            "control.token", "must be set when control.host is not a loopback address"
        )
    if token != token.strip() or len(set(token)) < 4 or len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            "control.token",
            f"is too weak for a non-loopback control.host: use at least {MIN_TOKEN_CHARS} "
            "random characters with no surrounding spaces (e.g. `openssl rand -hex 24`)",
        )


_STORE_DRIVERS = {"sqlite+aiosqlite": None, "postgresql+asyncpg": "asyncpg"}


def _check_store_url(url: str | None) -> None:
    if url is None:
        return
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in _STORE_DRIVERS:
        raise ConfigError(
            "store.url",
            f"unsupported database {scheme or url[:40]!r}: use sqlite+aiosqlite:///PATH or "
            "postgresql+asyncpg://USER:PASSWORD@HOST/DB",
        )
    module = _STORE_DRIVERS[scheme]
    if module and importlib.util.find_spec(module) is None:
        raise ConfigError(
            "store.url", f"needs the {module} driver: pip install 'hermes-gateway[postgres]'"
        )


def _check_redis_url(url: str | None) -> None:
    if url is None:
        return
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            "cluster.redis_url",
            f"unsupported URL {url[:40]!r}: use redis://HOST:PORT/DB, rediss://... or unix:///PATH",
        )
    if importlib.util.find_spec("redis") is None:
        raise ConfigError(
            "cluster.redis_url", "needs redis-py: pip install 'hermes-gateway[cluster]'"
        )


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _config_error(exc: ValidationError) -> ConfigError:
    """The first problem as the error (its key), the others carried along for `config check`."""
    problems = [_problem(err) for err in exc.errors()]
    key, reason = problems[0]
    others = tuple(f"{k}: {r}" for k, r in problems[1:])
    return ConfigError(key, reason, others=others)


def _problem(err: Any) -> tuple[str, str]:
    loc = [str(part) for part in err["loc"]]
    key = ".".join(loc)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        reason = "unknown key"
        guess = _close_key(loc)
        if guess:
            reason += f" (did you mean {guess!r}?)"
    elif kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        reason = "must be one of " + ", ".join(choices)
    elif kind == "missing":
        reason = "is required"
    else:
        reason = err["msg"][0].lower() + err["msg"][1:]
        if "input" in err and not isinstance(err["input"], dict | list):
            shown = repr(err["input"])
            reason += f" (got {shown[:80]}{'...' if len(shown) > 80 else ''})"
    return key, reason


def _close_key(loc: list[str]) -> str | None:
    """The known key of the same section closest to a misspelled one (`workres`)."""
    model: Any = Config
    for part in loc[:-1]:
        field = model.model_fields.get(part)
        model = field.annotation if field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.75)
    return close[0] if close else None


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
