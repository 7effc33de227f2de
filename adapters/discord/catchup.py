"""Catch-up after a new Discord session: Discord replays missed events only on a RESUME, so after
a fresh IDENTIFY (op 9, a restarted client) the messages posted meanwhile in recently active
channels are fetched and taken like live ones; the inbox drops what was already received."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping

import structlog

import discord

log = structlog.get_logger("hermes.adapters.discord")

Take = Callable[[discord.Message], Awaitable[None]]


class CatchUp:
    max_channels = 100
    max_age_s = 3600.0  # like store.replay_max_age_s: older conversations are not resumed
    per_channel = 50

    def __init__(self) -> None:
        self._last: OrderedDict[int, tuple[int, float]] = OrderedDict()  # channel -> id, seen at

    def saw(self, message: discord.Message) -> None:
        channel_id = message.channel.id
        last, _ = self._last.pop(channel_id, (0, 0.0))
        self._last[channel_id] = (max(last, message.id), time.monotonic())
        while len(self._last) > self.max_channels:
            self._last.popitem(last=False)

    def resume(self, last: Mapping[int, int]) -> None:
        """Start from another instance's newest ids (channel -> message id), each counted as
        seen when its message was posted; a newer id seen here stays."""
        now_wall, now = time.time(), time.monotonic()
        for channel_id, message_id in sorted(last.items(), key=lambda item: item[1]):
            if self._last.get(channel_id, (0, 0.0))[0] >= message_id:
                continue
            posted = discord.utils.snowflake_time(message_id).timestamp()
            self._last[channel_id] = (message_id, now - max(0.0, now_wall - posted))
            self._last.move_to_end(channel_id)
        while len(self._last) > self.max_channels:
            self._last.popitem(last=False)

    async def run(self, client: discord.Client, take: Take) -> int:
        """Fetch and take what was missed; returns how many messages were taken."""
        cutoff = time.monotonic() - self.max_age_s
        taken = 0
        for channel_id, (last, seen) in list(self._last.items()):
            if seen < cutoff:
                continue
            try:
                taken += await self._channel(client, channel_id, last, take)
            except discord.DiscordException as exc:
                log.warning("discord.catch_up_failed", channel_id=channel_id, error=repr(exc))
        log.info("discord.caught_up", channels=len(self._last), messages=taken)
        return taken

    async def _channel(self, client: discord.Client, channel_id: int, last: int, take: Take) -> int:
        channel = client.get_channel(channel_id) or await client.fetch_channel(channel_id)
        if not isinstance(channel, discord.abc.Messageable):
            return 0
        taken = 0
        history = channel.history(after=discord.Object(last), limit=self.per_channel)
        async for message in history:
            if message.id > last:
                await take(message)
                taken += 1
        return taken
