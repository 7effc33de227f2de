"""Telegram: python-telegram-bot 22 on the gateway's loop (long polling or webhook).

`SPEC` is what the gateway knows of it; importing this package does not import the SDK."""

from adapters.telegram.settings import TelegramConfig, webhook_problems
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

SPEC = PlatformSpec(
    name="telegram",
    section=TelegramConfig,
    adapter="adapters.telegram.adapter:TelegramAdapter",
    secrets={"token": "TELEGRAM_BOT_TOKEN", "webhook_secret": None},
    required=lambda section: ("token",),
    problems=webhook_problems,
    probe="adapters.telegram.probe:probe",
    menu=True,
    capabilities=Capabilities(can_edit=True, has_threads=True),
    # UTF-16 units, as Telegram counts them; the Bot API takes uploads up to 50 MB
    limits=Limits(message_chars=4096, upload_bytes=50 * 1024 * 1024),
    # a bot token, also inside the Bot API's /bot<token>/ URLs
    token_patterns=(r"(?<![0-9])\d{6,12}:[A-Za-z0-9_-]{30,}",),
    order=1,
)
