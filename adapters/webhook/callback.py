"""A route's answer POSTed to its callback URL through the web tools' SSRF guard: the host is
resolved off the loop, every address it resolves to must be public (or in
``platforms.webhook.callback_networks``), and the connection goes to the address checked, so
a DNS answer that changes in between cannot point it inward. No redirect is followed."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import structlog

from adapters.webhook.signing import hermes_header
from hermes_gateway.platforms import PermanentAdapterError, TransientAdapterError
from tools.errors import ToolError
from tools.ssrf import SsrfGuard

log = structlog.get_logger("hermes.adapters.webhook")
CALLBACK_TIMEOUT_S = 15.0


class Callbacks:
    """Sends answers to callback URLs; one HTTP client for them all."""

    def __init__(self, networks: tuple[str, ...]) -> None:
        self.guard = SsrfGuard(allowed_networks=networks)
        self.http = httpx.AsyncClient(timeout=CALLBACK_TIMEOUT_S, follow_redirects=False)

    async def close(self) -> None:
        await self.http.aclose()

    async def post(self, url: str, secret: str, delivery: str, answer: dict[str, Any]) -> None:
        """POST ``answer`` as JSON, signed like an inbound request (``X-Hermes-Signature``
        over ``<t>.<delivery>.<body>`` with the route's secret) and carrying the delivery id
        it answers (``X-Hermes-Delivery``), the same on every attempt, so the receiver can
        drop a repeat. A refused address or a 4xx is permanent; a 5xx or no answer is
        offered again (the delivery's pauses)."""
        target = httpx.URL(url)
        try:
            address = await asyncio.to_thread(self.guard.pin, target)
        except ToolError as exc:
            raise PermanentAdapterError(f"callback refused: {exc}") from None
        body = json.dumps(answer, ensure_ascii=False).encode()
        headers = {
            "Content-Type": "application/json",
            "Host": target.netloc.decode("ascii"),
            "X-Hermes-Delivery": delivery,
            "X-Hermes-Signature": hermes_header(secret, int(time.time()), delivery, body),
        }
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        request = self.http.build_request(
            "POST",
            target.copy_with(host=address),
            content=body,
            headers=headers,
            extensions=extensions,
        )
        try:
            response = await self.http.send(request)
        except httpx.HTTPError as exc:
            raise TransientAdapterError(
                f"callback to {target.host}: {type(exc).__name__}"
            ) from None
        await response.aclose()
        if response.status_code >= 500 or response.status_code == 429:
            raise TransientAdapterError(f"callback to {target.host}: {response.status_code}")
        if response.status_code >= 300:
            raise PermanentAdapterError(f"callback to {target.host}: {response.status_code}")
        log.info("webhook.callback_sent", host=target.host, delivery=delivery)
