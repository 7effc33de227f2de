"""Validating a loaded config: pydantic's errors as one `ConfigError` naming the key (with
a guess for a misspelled one), and the checks across keys the schema cannot express."""

from __future__ import annotations

import difflib
import importlib.util
import ipaddress
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from hermes_gateway.config.schema import Config
from hermes_gateway.errors import ConfigError
from hermes_gateway.platform_spec import platform_specs


def check_semantics(config: Config) -> None:
    """What the schema alone cannot say: required secrets, a safe control token, drivers."""
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


def config_error(exc: ValidationError) -> ConfigError:
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
