"""`hermes doctor`'s check of the Matrix access token: whoami on the homeserver."""

from __future__ import annotations

import httpx

from adapters.matrix.settings import MatrixConfig
from hermes_gateway.platforms import token_verdict


def probe(section: MatrixConfig, http: httpx.Client) -> str:
    response = http.get(
        f"{section.homeserver.rstrip('/')}/_matrix/client/v3/account/whoami",
        headers={"Authorization": f"Bearer {section.access_token}"},
    )
    return token_verdict(response, lambda data: data.get("user_id") or None)
