"""Mattermost's ``platforms.mattermost:`` config section (pure data: nothing of the adapter)."""

from __future__ import annotations

from pydantic import Field

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection

# Mattermost's default MaxPostSize: a post longer than this many characters is refused
POST_MAX_CHARS = 16383


class MattermostConfig(PlatformSection):
    url: str = ""  # the server, as users open it: https://chat.example.com
    token: str = ""  # the bot account's personal access token
    message_limit: int = Field(POST_MAX_CHARS, ge=100, le=65535)
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)
    ping_interval_s: float = Field(15, gt=0)  # WebSocket heartbeat: a dead socket is noticed
    # after a reconnect (or a restart) the posts of channels active within this long are
    # fetched by REST, so what was posted while the socket was down is answered too
    catch_up_max_age_s: float = Field(3600, ge=0)
    catch_up_channels: int = Field(200, ge=0)


def required_keys(section: MattermostConfig) -> tuple[str, ...]:
    return ("url", "token")


def api_base(url: str) -> str:
    """The REST v4 base of the server ``url`` (with or without a trailing slash)."""
    return url.rstrip("/") + "/api/v4"
