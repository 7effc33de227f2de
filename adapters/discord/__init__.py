"""Discord: a discord.py client on the gateway's loop, messages and slash commands.

`SPEC` is what the gateway knows of it; importing this package does not import the SDK."""

from adapters.discord.settings import DiscordConfig
from hermes_gateway.platforms import Capabilities, Limits, PlatformSpec

SPEC = PlatformSpec(
    name="discord",
    section=DiscordConfig,
    adapter="adapters.discord.adapter:DiscordAdapter",
    secrets={"token": "DISCORD_BOT_TOKEN"},
    required=lambda section: ("token",),
    probe="adapters.discord.probe:probe",
    menu=True,
    capabilities=Capabilities(can_edit=True, has_threads=True),
    # a bot's uploads: 10 MB per file unless the server is boosted
    limits=Limits(message_chars=2000, upload_bytes=10 * 1024 * 1024),
    # the bot token in an Authorization header; an interaction token ("interaction:" base64)
    token_patterns=(r"(?<=Bot )[A-Za-z0-9._-]{24,}", r"\baW50ZXJhY3Rpb246[A-Za-z0-9._-]+"),
    order=2,
)
