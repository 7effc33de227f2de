"""Signal's ``platforms.signal:`` config section (pure data: imports nothing of the adapter)."""

from __future__ import annotations

from pydantic import Field

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection

# Signal's own apps send a longer text as a "long text" attachment; 2000 characters is what
# they show inline, so a reply is split there
MESSAGE_CHARS = 2000


class SignalConfig(PlatformSection):
    # the bot's number as signal-cli knows it (``signal-cli -a +NUMBER daemon --http ...``)
    account: str = ""
    # the signal-cli daemon started with ``--http HOST:PORT``: POST /api/v1/rpc,
    # GET /api/v1/events (Server-Sent Events), GET /api/v1/check
    daemon_url: str = "http://127.0.0.1:8080"
    message_limit: int = Field(MESSAGE_CHARS, ge=100, le=MESSAGE_CHARS)
    # the reaction put on the message being answered while a run works; "" for none
    progress_reaction: str = "👀"
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)  # attachments fetched by getAttachment
    # how long the check of a reply part a crash left in doubt waits for the recipient's
    # delivery receipt before it sends the part again (docs/exactly-once.md)
    sent_check_wait_s: float = Field(5.0, ge=0, le=60)
    request_timeout_s: float = Field(30.0, gt=0)  # one JSON-RPC call to the daemon


def problems(section: SignalConfig) -> list[tuple[str, str]]:
    """An enabled section needs the account's number in international form."""
    if not section.account.startswith("+") or not section.account[1:].isdigit():
        return [("account", "the bot's Signal number in international form, e.g. +15550001111")]
    if not section.daemon_url.startswith(("http://", "https://")):
        return [
            ("daemon_url", "the signal-cli daemon's --http address, e.g. http://127.0.0.1:8080")
        ]
    return []
