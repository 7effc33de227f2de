"""`hermes doctor`'s check of the Telegram token: getMe."""

from __future__ import annotations

import httpx

from adapters.telegram.settings import TelegramConfig
from hermes_gateway.platforms import token_verdict


def probe(section: TelegramConfig, http: httpx.Client) -> str:
    response = http.post(f"{section.base_url}{section.token}/getMe")
    return token_verdict(
        response, lambda data: f"@{data['result']['username']}" if data.get("ok") else None
    )
