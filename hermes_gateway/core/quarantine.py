"""Poison messages held back from replay: what their users are told, and the operator's routes
on the control server (`GET /inbox`, `POST /inbox/{id}/retry|drop`) behind `hermes inbox`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.errors import RequestError, StoreError
from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Quarantined, Store

log = structlog.get_logger("hermes.quarantine")
NOTICE = (
    "Sorry: I could not process your message. Each time I worked on it I stopped responding, "
    "so I have set it aside rather than try again. My operator can retry it; sending it again "
    "would likely fail the same way."
)
Route = Callable[[MessageEvent, int], Awaitable[None]]


class InboxRoutes:
    """The quarantined entries as this process knows them (loaded at start, changed only
    here), so `/status` lists them without a database read."""

    def __init__(self, store: Store, route: Route) -> None:
        self.store = store
        self.route = route
        self._held: dict[int, dict[str, Any]] = {}

    def mount(self, add_route: Any) -> None:
        add_route("GET", "/inbox", self.list)
        add_route("POST", "/inbox/{inbox_id}/retry", self.retry)
        add_route("POST", "/inbox/{inbox_id}/drop", self.drop)

    async def load(self) -> None:
        """At start, after the replay's quarantine: every entry held back now."""
        try:
            held = await self.store.quarantined()
        except StoreError as exc:
            log.error("inbox.quarantine_list_failed", error=str(exc))
            return
        self._held = {q.inbox_id: q.summary() for q in held}

    def summaries(self) -> list[dict[str, Any]]:
        return list(self._held.values())

    async def list(self, request: web.Request) -> web.Response:
        return web.json_response({"quarantined": self.summaries()})

    async def retry(self, request: web.Request) -> web.Response:
        """Release the entry and process it now, as if it had just arrived."""
        inbox_id = _inbox_id(request)
        event = await self.release(inbox_id)
        return web.json_response({"retried": inbox_id, "session_key": event.session_key})

    async def release(self, inbox_id: int) -> MessageEvent:
        """Retry: release the entry and route it; a `RequestError` 404 if it is not held."""
        event = await self.store.release(inbox_id)
        if event is None:
            raise RequestError(404, f"inbox entry {inbox_id} is not quarantined", "not_found")
        self._held.pop(inbox_id, None)
        log.info("inbox.released", inbox_id=inbox_id, session_key=event.session_key)
        await self.route(event, inbox_id)
        return event

    async def drop(self, request: web.Request) -> web.Response:
        inbox_id = _inbox_id(request)
        await self.discard(inbox_id)
        return web.json_response({"dropped": inbox_id})

    async def discard(self, inbox_id: int) -> None:
        """Drop: a `RequestError` 404 if the entry is not held."""
        if not await self.store.discard(inbox_id):
            raise RequestError(404, f"inbox entry {inbox_id} is not quarantined", "not_found")
        self._held.pop(inbox_id, None)
        log.info("inbox.discarded", inbox_id=inbox_id)


def log_quarantined(held: list[Quarantined]) -> None:
    for q in held:
        log.warning(
            "inbox.quarantined",
            inbox_id=q.inbox_id,
            session_key=q.event.session_key,
            platform=q.event.platform,
            attempts=q.attempts,
        )


def _inbox_id(request: web.Request) -> int:
    raw = request.match_info["inbox_id"]
    if not raw.isdigit() or len(raw) > 18:
        raise RequestError(400, "the inbox id must be a number", "invalid_id")
    return int(raw)
