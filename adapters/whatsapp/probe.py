"""`hermes doctor`'s check of the WhatsApp access token: GET /{phone-number-id}, which answers
with the number's name only for a token allowed to send from it."""

from __future__ import annotations

import httpx

from adapters.whatsapp.settings import WhatsAppConfig
from hermes_gateway.platforms import token_verdict


def probe(section: WhatsAppConfig, http: httpx.Client) -> str:
    base = section.api_base if section.api_base.endswith("/") else section.api_base + "/"
    response = http.get(
        f"{base}{section.api_version}/{section.phone_number_id}",
        headers={"Authorization": f"Bearer {section.access_token}"},
    )
    return token_verdict(response, _who)


def _who(data: dict[str, object]) -> str | None:
    name = data.get("verified_name") or data.get("display_phone_number")
    return str(name) if name else None
