"""The Graph API calls the gateway makes for WhatsApp (httpx, already a dependency): send a
message, mark one read (with the typing indicator), look a media id up, check the phone
number. Graph's error codes become the gateway's errors: retry, wait, or give up."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import structlog

from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
    retry_after_s,
)

log = structlog.get_logger("hermes.adapters.whatsapp")
TIMEOUT = httpx.Timeout(20.0, connect=10.0)
# Graph gives no Retry-After: how long each rate limit is worth waiting. 130429: the number's
# throughput (messages per second); 131056: one user gets about one message per 6 s in a
# burst; 80007 and 4: the account's or app's hourly call budget, retried a few times
RATE_LIMITS: Mapping[int, float] = {130429: 2.0, 131056: 6.0, 80007: 60.0, 4: 60.0, 613: 60.0}
AUTH_CODES = frozenset({190, 10, 200})  # token expired or revoked; permission missing
# Graph's own trouble: unknown error, service unavailable, "something went wrong", overloaded
TRANSIENT_CODES = frozenset({1, 2, 131000, 131016})
WINDOW_CLOSED = 131047  # more than 24 hours since the user last wrote: only a template goes
UNDELIVERABLE = 131026  # not a WhatsApp user, an old app, or the user blocked the number


class WindowClosedError(PermanentAdapterError):
    """The 24-hour customer-service window is closed: only a template message can go."""


def graph_error(status: int, body: Any) -> AdapterError:
    """The gateway's error for a Graph answer that is not a success."""
    error = body.get("error") if isinstance(body, Mapping) else None
    error = error if isinstance(error, Mapping) else {}
    code = error.get("code")
    code = code if isinstance(code, int) else 0
    text = f"whatsapp: HTTP {status}, code {code}: {str(error.get('message') or '')[:200]}"
    if code == WINDOW_CLOSED:
        return WindowClosedError(text)
    if code in RATE_LIMITS:
        return RateLimitedError(text, RATE_LIMITS[code])
    if code in AUTH_CODES or status == 401:
        return AdapterAuthError(text)
    if status == 429:
        return RateLimitedError(text, 2.0)
    if code in TRANSIENT_CODES or status >= 500:
        return TransientAdapterError(text)
    return PermanentAdapterError(text)


class Graph:
    """One phone number's calls. The bearer token goes in a header, never in a URL."""

    def __init__(self, api_base: str, version: str, phone_number_id: str, token: str) -> None:
        base = api_base if api_base.endswith("/") else api_base + "/"
        self.root = f"{base}{version}/"
        self.messages_url = f"{self.root}{phone_number_id}/messages"
        self.phone_number_id = phone_number_id
        self.client = httpx.AsyncClient(
            timeout=TIMEOUT, headers={"Authorization": f"Bearer {token}"}
        )

    async def call(self, method: str, url: str, body: Mapping[str, Any] | None = None) -> Any:
        """One request; its JSON answer, or the error Graph's answer maps to."""
        try:
            response = await self.client.request(method, url, json=body)
        except httpx.HTTPError as exc:
            raise TransientAdapterError(f"whatsapp: {type(exc).__name__}: {exc}") from None
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code == 200 and isinstance(data, dict):
            return data
        error = graph_error(response.status_code, data)
        if isinstance(error, RateLimitedError) and "Retry-After" in response.headers:
            error = RateLimitedError(str(error), retry_after_s(response.headers["Retry-After"]))
        raise error

    async def send(self, payload: Mapping[str, Any]) -> str:
        """POST /{phone-number-id}/messages; the new message's wamid."""
        body = {"messaging_product": "whatsapp", "recipient_type": "individual", **payload}
        data = await self.call("POST", self.messages_url, body)
        messages = data.get("messages")
        first = messages[0] if isinstance(messages, list) and messages else {}
        wamid = first.get("id") if isinstance(first, Mapping) else None
        return wamid if isinstance(wamid, str) else ""

    async def mark_read(self, message_id: str, typing: bool) -> None:
        """The blue ticks on ``message_id``, and with ``typing`` the indicator (shown until
        the reply, at most 25 s)."""
        body: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": message_id,
        }
        if typing:
            body["typing_indicator"] = {"type": "text"}
        await self.call("POST", self.messages_url, body)

    async def media(self, media_id: str) -> Mapping[str, Any]:
        """GET /{media-id}: its short-lived download url, mime_type and file_size."""
        result: Mapping[str, Any] = await self.call("GET", f"{self.root}{media_id}")
        return result

    async def phone_number(self) -> Mapping[str, Any]:
        """GET /{phone-number-id}: the number's display name and quality (the token check)."""
        result: Mapping[str, Any] = await self.call("GET", f"{self.root}{self.phone_number_id}")
        return result

    async def aclose(self) -> None:
        await self.client.aclose()
