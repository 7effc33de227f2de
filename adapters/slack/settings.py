"""Slack's ``platforms.slack:`` config section (pure data: no SDK import)."""

from __future__ import annotations

import hashlib
import re
from typing import Literal

from pydantic import Field

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection

SOCKET_SLOTS_MAX = 10  # Slack's limit of concurrent Socket Mode connections per app
_APP_TOKEN = re.compile(r"^xapp-\d+-([A-Z0-9]+)-")


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
    # in a cluster, at most this many instances hold a Socket Mode connection (Slack allows 10)
    socket_slots: int = Field(SOCKET_SLOTS_MAX, ge=1, le=SOCKET_SLOTS_MAX)
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)  # files come from files.slack.com


def required_tokens(section: SlackConfig) -> tuple[str, ...]:
    """The bot token always; Socket Mode's app token, or the Events API's signing secret."""
    return ("bot_token", "app_token" if section.mode == "socket" else "signing_secret")


def app_key(app_token: str) -> str:
    """The app's id as the app-level token carries it (``xapp-1-<app id>-...``), else a digest
    of the token: names the app's socket slots, the same on every instance."""
    found = _APP_TOKEN.match(app_token)
    return found.group(1) if found else hashlib.sha256(app_token.encode()).hexdigest()[:12]
