"""The operator's route for removing a person's archive memories on request: `POST
/memory/forget` (always behind the control token), used by `hermes memory forget`."""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.errors import RequestError
from hermes_gateway.memory.host import MemoryHost
from hermes_gateway.memory.scope import user_bank
from hermes_gateway.text.jsonbody import read_object

log = structlog.get_logger("hermes.memory")
MAX_IDS = 10_000


class MemoryRoutes:
    def __init__(self, memory: MemoryHost) -> None:
        self.memory = memory

    def mount(self, add_route: Any) -> None:
        add_route("POST", "/memory/forget", self.forget)

    async def forget(self, request: web.Request) -> web.Response:
        """Body: ``{"user": "telegram:42", "all": true}`` or ``{"user": ..., "ids": [3, 7]}``;
        answers the bank, the ids deleted and the ids it does not hold."""
        bank, ids = parse_forget(await read_object(request))
        gone = await self.memory.forget_bank(bank, ids)
        log.info("memory.forgotten", bank=bank, ids=gone, by="operator")
        missing = [i for i in ids if i not in set(gone)] if ids is not None else []
        body = {"bank": bank, "forgotten": gone, "missing": missing, "scope": self.memory.scope}
        return web.json_response(body)


def parse_forget(data: dict[str, Any]) -> tuple[str, list[int] | None]:
    """The bank and the ids (None: all) of a forget request, or a `RequestError` 400."""
    user = data.get("user")
    if not isinstance(user, str):
        raise RequestError(400, "'user' is required: PLATFORM:USER, e.g. telegram:123456789")
    try:
        bank = user_bank(user)
    except ValueError as exc:
        raise RequestError(400, str(exc)) from None
    ids, everything = data.get("ids"), data.get("all") is True
    if everything == (ids is not None):
        raise RequestError(400, "give either 'all': true or 'ids' (a list of memory ids)")
    if everything:
        return bank, None
    if not isinstance(ids, list) or not ids or len(ids) > MAX_IDS:
        raise RequestError(400, f"'ids' must be a list of 1 to {MAX_IDS} memory ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids):
        raise RequestError(400, "'ids' must hold positive integers (m12 is 12)")
    return bank, list(dict.fromkeys(ids))
