"""The webhook platform's ``platforms.webhook:`` section: its named routes, each with its own
secret, signature scheme, prompt template, session and answer's destination (pure data)."""

from __future__ import annotations

import ipaddress
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adapters.webhook.template import Template, TemplateError

ROUTE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MIN_SECRET_CHARS = 16  # a route's secret is its only access check
DEFAULT_TEMPLATE = "Webhook {@route} received a {@event} event:\n{@payload}"
# where a route's answer goes besides "response" and "callback": a chat on another platform
TARGET = re.compile(r"^([a-z][a-z0-9_-]*):([^:\s]+)(?::([^:\s]+))?$")


class WebhookRoute(BaseModel):
    """One named route, `POST <path_prefix>/<name>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: str = ""  # the HMAC key; set it with ${VAR} to keep it out of the file
    scheme: Literal["hermes", "github"] = "hermes"
    template: str = DEFAULT_TEMPLATE
    field_chars: int = Field(500, ge=1, le=100_000)  # one substituted value's cap
    prompt_chars: int = Field(4000, ge=1, le=100_000)  # the rendered prompt's cap
    # "" : one session for the route; else a payload field whose value names the session
    session_field: str = ""
    # response | callback | log | <platform>:<chat>[:<thread>]
    deliver: str = "response"
    callback_url: str = ""
    timeout_s: float = Field(25.0, gt=0, le=600)  # "response": how long the request waits
    # where an answer goes that no open request takes ("response" past its timeout, or after
    # a restart): log | callback | <platform>:<chat>[:<thread>]
    fallback: str = "log"
    max_skew_s: int = Field(300, ge=1, le=86_400)  # the "hermes" scheme's timestamp window

    @field_validator("template")
    @classmethod
    def _template_parses(cls, value: str) -> str:
        try:
            Template.parse(value)
        except TemplateError as exc:
            raise ValueError(str(exc)) from None
        return value


class WebhookConfig(BaseModel):
    """``platforms.webhook``: off unless enabled; no access rules of its own (each route's
    secret is its access), so it is not a `PlatformSection`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    path_prefix: str = Field("/webhooks", pattern=r"^/[A-Za-z0-9/_-]*[A-Za-z0-9_-]$")
    routes: dict[str, WebhookRoute] = Field(default_factory=dict)
    # networks a callback URL may reach besides public addresses (the web tools' SSRF guard,
    # the same semantics as tools.web.allowed_networks)
    callback_networks: tuple[str, ...] = ()
    # webhook events of one session wait their turn: each alert gets its own answer
    busy_policy: Literal["runner", "interrupt", "queue", "latest", "collect", "steer"] = "queue"

    @field_validator("callback_networks")
    @classmethod
    def _networks_parse(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for net in value:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError:
                raise ValueError(f"{net!r} is not a CIDR network") from None
        return value


def problems(section: WebhookConfig) -> list[tuple[str, str]]:
    """What the schema alone cannot say of an enabled section (`hermes config check`, the
    start and `hermes doctor` refuse it): each route's name, secret and destinations."""
    found: list[tuple[str, str]] = []
    if not section.routes:
        found.append(("routes", "name at least one route when platforms.webhook is enabled"))
    for name, route in section.routes.items():
        key = f"routes.{name}"
        if not ROUTE_NAME.match(name):
            found.append((key, "a route's name is 1-64 of a-z, 0-9, _ and -"))
        if len(route.secret.strip()) < MIN_SECRET_CHARS:
            found.append((f"{key}.secret", f"must be set, at least {MIN_SECRET_CHARS} characters"))
        for which in ("deliver", "fallback"):
            found += [(f"{key}.{which}", why) for why in _destination(section, route, which)]
    return found


def _destination(section: WebhookConfig, route: WebhookRoute, which: str) -> list[str]:
    value = getattr(route, which)
    fixed = ("response", "callback", "log") if which == "deliver" else ("callback", "log")
    if value in fixed:
        if value == "callback":
            return callback_problems(route.callback_url, section.callback_networks)
        return []
    match = TARGET.match(value)
    if match is None:
        return [f"must be one of {', '.join(fixed)} or <platform>:<chat>[:<thread>]"]
    if match.group(1) == "webhook":
        return ["a webhook's answer cannot go to a webhook"]
    return []


def callback_problems(url: str, networks: tuple[str, ...]) -> list[str]:
    """Why ``url`` cannot be a callback, as far as the text says (the doctor resolves it too):
    http(s), a host, no credentials; a literal address must be public or allowed."""
    if not url:
        return ["callback_url must be set for a callback"]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ["callback_url must be an http(s) URL with a host"]
    if parts.username or parts.password:
        return ["callback_url must not carry credentials"]
    try:
        address = ipaddress.ip_address(parts.hostname)
    except ValueError:
        return []  # a name: resolved and checked when the callback is sent, and by the doctor
    allowed = any(address in ipaddress.ip_network(n, strict=False) for n in networks)
    if not (allowed or address.is_global):
        return [f"callback_url's address {address} is not public nor in callback_networks"]
    return []


def parse_target(value: str) -> tuple[str, str, str | None]:
    """``<platform>:<chat>[:<thread>]`` (checked by `problems`) as its three parts."""
    match = TARGET.match(value)
    assert match is not None, value
    return match.group(1), match.group(2), match.group(3)


def route_secrets(section: WebhookConfig) -> tuple[str, ...]:
    """Every route's secret, for the log redactor (set or not, enabled or not)."""
    return tuple(route.secret for route in section.routes.values())
