"""`hermes doctor`'s check of the Mattermost token: GET /api/v4/users/me as the bot."""

from __future__ import annotations

import httpx

from adapters.mattermost.settings import MattermostConfig, api_base
from hermes_gateway.platforms import token_verdict


def probe(section: MattermostConfig, http: httpx.Client) -> str:
    response = http.get(
        f"{api_base(section.url)}/users/me", headers={"Authorization": f"Bearer {section.token}"}
    )

    def who(data: dict[str, object]) -> str | None:
        if not data.get("id"):
            return None
        bot = "" if data.get("is_bot") else " (not a bot account)"
        return f"@{data.get('username')}{bot}"

    return token_verdict(response, who)
