"""`hermes doctor`'s check of the Slack bot token: auth.test."""

from __future__ import annotations

import httpx

from adapters.slack.settings import SlackConfig
from hermes_gateway.platforms import token_verdict


def probe(section: SlackConfig, http: httpx.Client) -> str:
    base = section.api_base if section.api_base.endswith("/") else section.api_base + "/"
    response = http.post(
        f"{base}auth.test", headers={"Authorization": f"Bearer {section.bot_token}"}
    )
    return token_verdict(
        response,
        lambda data: f"{data.get('user')} in {data.get('team')}" if data.get("ok") else None,
    )
