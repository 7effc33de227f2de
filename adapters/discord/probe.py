"""`hermes doctor`'s check of the Discord bot token: users/@me."""

from __future__ import annotations

import httpx

from adapters.discord.settings import DiscordConfig
from hermes_gateway.platforms import token_verdict


def probe(section: DiscordConfig, http: httpx.Client) -> str:
    response = http.get(
        f"{section.api_base}/users/@me", headers={"Authorization": f"Bot {section.token}"}
    )
    return token_verdict(
        response, lambda data: str(data["username"]) if "username" in data else None
    )
