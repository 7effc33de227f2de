"""Matrix's ``platforms.matrix:`` config section (pure data: no client library import)."""

from __future__ import annotations

from pydantic import Field

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection


class MatrixConfig(PlatformSection):
    homeserver: str = ""  # the client-server API's base URL, e.g. https://matrix.example.org
    access_token: str = ""  # the bot user's token (MATRIX_ACCESS_TOKEN)
    sync_timeout_s: float = Field(30.0, gt=0, le=300)  # /sync long-poll wait
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)
