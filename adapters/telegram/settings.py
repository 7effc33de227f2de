"""Telegram's ``platforms.telegram:`` config section (pure data: no SDK import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection


class TelegramConfig(PlatformSection):
    token: str = ""
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str = "https://api.telegram.org/file/bot"
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str = ""  # public URL Telegram posts to (webhook mode)
    webhook_secret: str = ""  # checked against X-Telegram-Bot-Api-Secret-Token
    webhook_path: str = "/telegram/webhook"  # route on the control server
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)


def webhook_problems(section: TelegramConfig) -> list[tuple[str, str]]:
    """Webhook mode needs the public URL Telegram posts to and the secret it signs with."""
    if section.mode != "webhook":
        return []
    missing = [key for key in ("webhook_url", "webhook_secret") if not getattr(section, key)]
    return [(key, "must be set in webhook mode") for key in missing]
