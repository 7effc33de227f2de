"""Telegram's part of attachment downloads, its wire primitive: getFile turns the file id a
message carries into the URL the core's downloader streams from (the bot token is in its
path, so the URL never reaches a log line)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from adapters.telegram.sending import call
from hermes_gateway.platforms import (
    Attachment,
    Downloader,
    Locate,
    PermanentAdapterError,
    origins,
    with_retry,
)
from telegram import Bot


def file_downloader(folder: Path, cap: int, base_file_url: str) -> Downloader:
    """Downloads from the Bot API's file host (``base_file_url``), capped at ``cap`` bytes."""
    return Downloader("telegram", folder, cap, origins(base_file_url))


def locator(bot: Bot) -> Locate:
    """getFile for an attachment: its download URL, the size Telegram reports now, and the
    file's unique id (short and stable: the name it is kept under)."""

    async def locate(attachment: Attachment) -> Attachment:
        file = await with_retry(
            lambda: call(lambda: bot.get_file(attachment.file_id)), what="telegram.getFile"
        )
        if not file.file_path:
            raise PermanentAdapterError(f"Telegram has no download for {attachment.name}")
        return replace(
            attachment,
            url=file.file_path,  # PTB prefixes the configured file URL and the token
            size=file.file_size or attachment.size,
            file_id=file.file_unique_id or attachment.file_id,
        )

    return locate
