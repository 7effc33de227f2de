"""The discord.py client the Discord adapter runs: intents, the endpoints from config, and the
gateway commands (`/stop`, `/new`, ...) as application commands."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

import discord
from adapters.discord.settings import DiscordConfig

# re-exported (`X as X`): the adapter sets its endpoints through this module
from adapters.shims.discordpy import Endpoints as Endpoints
from adapters.shims.discordpy import gateway_parsers
from adapters.shims.discordpy import point_at as point_at
from adapters.shims.discordpy import restore as restore
from discord import app_commands
from hermes_gateway.platforms import CommandInfo, menu

log = structlog.get_logger("hermes.adapters.discord")

_VITAL = frozenset({"READY", "RESUMED"})  # without these the session is broken anyway

OnCommand = Callable[["discord.Interaction[Any]", str, str], Awaitable[None]]
Pace = Callable[[int | None, bool], Awaitable[None]]  # shard id, initial


class ClientEvents(Protocol):
    """What the client reports to the adapter."""

    async def on_ready(self) -> None: ...

    async def on_resumed(self) -> None: ...

    async def on_disconnect(self) -> None: ...

    async def on_message(self, message: discord.Message) -> None: ...

    async def on_command(
        self, interaction: discord.Interaction[Any], name: str, args: str
    ) -> None: ...


def intents(message_content: bool) -> discord.Intents:
    """Guilds (channels, threads), DMs, guild messages, and the privileged message content."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.dm_messages = True
    wanted.guild_messages = True
    wanted.message_content = message_content
    return wanted


class HermesClient(discord.Client):
    """A `discord.Client` that forwards its events to the adapter and owns the command tree."""

    def __init__(
        self,
        events: ClientEvents,
        config: DiscordConfig,
        *,
        message_content: bool = True,
        shard: tuple[int, int] | None = None,
        pace: Pace | None = None,
    ) -> None:
        super().__init__(
            shard_id=shard[0] if shard else None,
            shard_count=shard[1] if shard else None,
            intents=intents(message_content),
            guild_ready_timeout=config.guild_ready_timeout_s,
            # the model's text must never ping @everyone, roles or arbitrary users
            allowed_mentions=discord.AllowedMentions(
                everyone=False, users=False, roles=False, replied_user=True
            ),
        )
        self.events = events
        self.identify_delay = config.identify_delay_s
        self.pace = pace  # spaces the IDENTIFYs of several shards (in a cluster: of all)
        self.tree: app_commands.CommandTree[HermesClient] = _Tree(self)
        for info in menu():
            self.tree.add_command(_command(info, events.on_command))
        _guard_parsers(gateway_parsers(self))

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        # Discord allows one IDENTIFY per 5 s per bot; discord.py's default waits exactly that
        if self.pace is not None:
            await self.pace(shard_id, initial)
        elif not initial and self.identify_delay > 0:
            await asyncio.sleep(self.identify_delay)

    async def on_ready(self) -> None:
        await self.events.on_ready()

    async def on_resumed(self) -> None:
        await self.events.on_resumed()

    async def on_disconnect(self) -> None:
        await self.events.on_disconnect()

    async def on_message(self, message: discord.Message) -> None:
        await self.events.on_message(message)

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        log.exception("discord.handler_failed", handler=event_method)


def _guard_parsers(parsers: dict[str, Callable[[Any], None]]) -> None:
    """A payload discord.py cannot parse raises out of the gateway loop and drops the
    connection (and every message until the session is back); drop just that event instead."""
    for event, parse in list(parsers.items()):
        if event not in _VITAL:
            parsers[event] = functools.partial(_parse_guarded, event, parse)


def _parse_guarded(event: str, parse: Callable[[Any], None], data: Any) -> None:
    try:
        parse(data)
    except Exception as exc:
        log.error("discord.bad_payload", gateway_event=event, error=repr(exc))


class _Tree(app_commands.CommandTree[HermesClient]):
    async def on_error(
        self, interaction: discord.Interaction[HermesClient], error: app_commands.AppCommandError, /
    ) -> None:
        log.error("discord.command_failed", error=repr(error), interaction_id=interaction.id)


def _command(info: CommandInfo, on_command: OnCommand) -> app_commands.Command[Any, Any, None]:
    name, description = info.name, info.description
    if info.argument:

        @app_commands.describe(message=f"Your {info.argument}")
        async def with_text(interaction: discord.Interaction[Any], message: str) -> None:
            await on_command(interaction, name, message)

        return app_commands.Command(name=name, description=description, callback=with_text)

    async def plain(interaction: discord.Interaction[Any]) -> None:
        await on_command(interaction, name, "")

    return app_commands.Command(name=name, description=description, callback=plain)
