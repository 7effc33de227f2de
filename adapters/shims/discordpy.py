"""discord.py internals the Discord adapter relies on, in one place.

- `Route.BASE` and `DiscordWebSocket.DEFAULT_GATEWAY`: discord.py has no setting for the REST
  base or the gateway URL; these class attributes are process-global, so one process serves
  one Discord endpoint (the gateway runs one Discord client).
- `Client._connection.parsers`: the table of gateway-event parsers. discord.py has no hook for
  a payload its parser raises on (the exception leaves the gateway loop and drops the
  connection); wrapping the entries here is the only place to catch it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import discord
import discord.gateway
import discord.http
import yarl

Endpoints = tuple[str, yarl.URL]
Parsers = dict[str, Callable[[Any], None]]


def point_at(api_base: str, gateway_url: str) -> Endpoints:
    """Set discord.py's REST base and gateway URL (so a daemon can be pointed at a proxy or a
    fake); returns the previous values for `restore`."""
    saved = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
    discord.http.Route.BASE = api_base.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
    return saved


def restore(saved: Endpoints) -> None:
    discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = saved


def gateway_parsers(client: discord.Client) -> Parsers:
    """The client's live table of gateway-event parsers (event name -> parse(data))."""
    parsers: Parsers = client._connection.parsers
    return parsers
