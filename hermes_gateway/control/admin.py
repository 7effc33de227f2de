"""Operator endpoints on the control server (always behind the control token): pairing list,
approve and revoke, used by `hermes pairing ...`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.core.delivery import Delivery
from hermes_gateway.errors import RequestError
from hermes_gateway.events import Chat, OutboundMessage
from hermes_gateway.platforms.adapter import Adapter
from hermes_gateway.platforms.pairing import Approved, PairingBook, PairingError
from hermes_gateway.text.jsonbody import read_object

log = structlog.get_logger("hermes.admin")
WELCOME = "You're approved. Say hi!"


class AdminRoutes:
    def __init__(
        self, pairing: PairingBook, adapters: Mapping[str, Adapter], delivery: Delivery
    ) -> None:
        self.pairing = pairing
        self.adapters = adapters
        self.delivery = delivery

    def mount(self, add_route: Any) -> None:
        add_route("GET", "/pairing", self.list)
        add_route("POST", "/pairing/approve", self.approve)
        add_route("POST", "/pairing/revoke", self.revoke)

    async def list(self, request: web.Request) -> web.Response:
        return web.json_response({"entries": await self.pairing.entries()})

    async def approve(self, request: web.Request) -> web.Response:
        body = await json_fields(request, "platform", "code")
        approved = await self.approve_code(body["platform"], body["code"])
        return web.json_response(
            {
                "approved": {
                    "platform": approved.platform,
                    "user_id": approved.user_id,
                    "user_name": approved.user_name,
                }
            }
        )

    async def revoke(self, request: web.Request) -> web.Response:
        body = await json_fields(request, "platform", "user_id")
        await self.revoke_user(body["platform"], body["user_id"])
        return web.json_response({"revoked": True})

    async def approve_code(self, platform: str, code: str) -> Approved:
        """Approve and welcome the user; a `RequestError` 400 for a code that does not pair."""
        try:
            approved = await self.pairing.approve(platform, code)
        except PairingError as exc:
            raise RequestError(400, str(exc), "pairing_failed") from None
        await self._welcome(approved)
        return approved

    async def revoke_user(self, platform: str, user_id: str) -> None:
        if not await self.pairing.revoke(platform, user_id):
            raise RequestError(404, "no such paired user", "not_found")

    async def _welcome(self, approved: Approved) -> None:
        if approved.platform not in self.adapters or not approved.chat_id:
            return
        out = OutboundMessage.to(Chat(approved.platform, approved.chat_id), WELCOME, "notice")
        await self.delivery.send(out, outcome="pairing")


async def json_fields(request: web.Request, *keys: str) -> dict[str, str]:
    """The named fields of a JSON object body, each a non-empty string (or a number, as ids
    often are), or a `RequestError` naming the first one missing."""
    data = await read_object(request)
    out = {}
    for key in keys:
        value = data.get(key)
        if not isinstance(value, str | int) or str(value).strip() == "":
            raise RequestError(400, f"'{key}' is required")
        out[key] = str(value).strip()
    return out
