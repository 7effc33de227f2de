"""Slack's ``platforms.slack:`` config section (pure data: no SDK import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hermes_gateway.platform_spec import MEDIA_MAX_BYTES, PlatformSection


class SlackConfig(PlatformSection):
    mode: Literal["socket", "http"] = "socket"
    bot_token: str = ""
    app_token: str = ""
    signing_secret: str = ""
    events_path: str = "/slack/events"
    api_base: str = "https://slack.com/api/"
    message_limit: int = Field(3900, ge=100, le=39000)
    progress: Literal["reaction", "status", "none"] = "reaction"
    progress_reaction: str = "eyes"
    ping_interval_s: float = Field(10, gt=0)  # Socket Mode ping; a dead socket is noticed after it
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)  # files come from files.slack.com


def required_tokens(section: SlackConfig) -> tuple[str, ...]:
    """The bot token always; Socket Mode's app token, or the Events API's signing secret."""
    return ("bot_token", "app_token" if section.mode == "socket" else "signing_secret")
