"""Discord's ``platforms.discord:`` config section (pure data: no SDK import)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection


class DiscordConfig(PlatformSection):
    token: str = ""
    api_base: str = "https://discord.com/api/v10"
    gateway_url: str = "wss://gateway.discord.gg"
    allow_bots: bool = False
    sync_commands: bool = True  # register the gateway commands as slash commands at start
    guild_ready_timeout_s: float = Field(2, ge=0)  # wait for guild data before READY counts
    identify_delay_s: float = Field(5, ge=0)  # pause before a re-IDENTIFY (Discord: 1 per 5 s)
    # attachments are fetched from Discord's CDN hosts, or from this base (a proxy, a fake)
    cdn_base: str = "https://cdn.discordapp.com"
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)
    # gateway shards; None: as many as Discord recommends (GET /gateway/bot) at start. In a
    # cluster the instances split them; every instance must see the same number
    shard_count: int | None = Field(None, ge=1)

    @field_validator("cdn_base")
    @classmethod
    def _http_base(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value
