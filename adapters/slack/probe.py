"""`hermes doctor`'s check of the Slack bot token: auth.test, and whether the token's scopes
(Slack lists them in the answer's ``x-oauth-scopes`` header) let `send_file` share files."""

from __future__ import annotations

import httpx

from adapters.slack.settings import SlackConfig
from hermes_gateway.platforms import token_verdict


def probe(section: SlackConfig, http: httpx.Client) -> str:
    base = section.api_base if section.api_base.endswith("/") else section.api_base + "/"
    response = http.post(
        f"{base}auth.test", headers={"Authorization": f"Bearer {section.bot_token}"}
    )
    verdict = token_verdict(
        response,
        lambda data: f"{data.get('user')} in {data.get('team')}" if data.get("ok") else None,
    )
    scopes = response.headers.get("x-oauth-scopes")
    if scopes is not None and "files:write" not in {s.strip() for s in scopes.split(",")}:
        verdict += "; no files:write scope: files the agent sends (send_file) cannot be shared"
    return verdict
