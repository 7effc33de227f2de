"""The local API's session feeds: `GET /v1/events?user=NAME` streams, as server-sent events,
what the gateway says in that session unasked (a scheduled job's answer), for `hermes chat` to
show when it comes. The session's history keeps it too, for a client that was not listening.
In a cluster the instance that sends it shares it with the others, whose clients listen too."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import structlog
from aiohttp import web

from adapters.api.wire import session_name
from hermes_gateway.platforms import RequestError

log = structlog.get_logger("hermes.adapters.api")
PING_S = 15.0  # a comment line this often keeps proxies and the client's read timeout quiet
MAX_PER_SESSION = 4  # a few terminals on one session; more is a client looping on reconnects
MAX_FEEDS = 64  # every session's together: each holds a connection and a queue
WATCH_S = 0.5  # how often an idle feed checks that its client is still there
QUEUE_SIZE = 32  # what one slow reader may have waiting; past it the oldest goes (history has it)
_CLOSED: dict[str, Any] = {}  # put in a feed's queue: the gateway is stopping


class Feeds:
    """Who listens to which session (by the session's name, the `user` of a request), and
    what is published to them. Used on the event-loop thread only."""

    def __init__(
        self,
        ping_s: float = PING_S,
        per_session: int = MAX_PER_SESSION,
        most: int = MAX_FEEDS,
    ) -> None:
        self.ping_s = ping_s
        self.per_session = per_session
        self.most = most
        self._feeds: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}

    def __len__(self) -> int:
        return sum(len(queues) for queues in self._feeds.values())

    def publish(self, name: str, item: dict[str, Any]) -> int:
        """Hand ``item`` to every feed of session ``name``; how many there were."""
        queues = self._feeds.get(name, set())
        for queue in queues:
            if queue.full():  # a reader that stopped reading: it loses the oldest, not us
                queue.get_nowait()
            queue.put_nowait(item)
        return len(queues)

    def close(self) -> None:
        """The gateway stops: every feed ends (its client reconnects to the next process)."""
        for queues in self._feeds.values():
            for queue in queues:
                if queue.full():
                    queue.get_nowait()
                queue.put_nowait(_CLOSED)

    async def serve(self, request: web.Request, name: str) -> web.StreamResponse:
        """One client's feed of session ``name``, until it goes or the gateway stops."""
        if len(self._feeds.get(name, ())) >= self.per_session or len(self) >= self.most:
            raise RequestError(429, "too many feeds open; close one and retry", "too_many_feeds")
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self._feeds.setdefault(name, set()).add(queue)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await response.prepare(request)
            await response.write(b": connected\n\n")  # the client knows it is listening
            await self._pump(request, response, queue)
        except ConnectionError:  # the client went: nothing to tell anyone
            pass
        finally:
            queues = self._feeds.get(name, set())
            queues.discard(queue)
            if not queues:
                self._feeds.pop(name, None)
        return response

    async def _pump(
        self, request: web.Request, response: web.StreamResponse, queue: asyncio.Queue[Any]
    ) -> None:
        """Write what comes until the gateway stops or the client goes; a client gone is seen
        within `WATCH_S` (its transport closes), not only at the next write."""
        loop = asyncio.get_running_loop()
        ping_at = loop.time() + self.ping_s
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), WATCH_S)
            except TimeoutError:
                if request.transport is None or request.transport.is_closing():
                    return
                if loop.time() >= ping_at:
                    await response.write(b": ping\n\n")
                    ping_at = loop.time() + self.ping_s
                continue
            if item is _CLOSED:
                await response.write(b"event: closing\ndata: {}\n\n")
                return
            await response.write(f"data: {json.dumps(item)}\n\n".encode())


def unasked(session_name: str, text: str, kind: str, run_id: str | None) -> dict[str, Any]:
    """What a feed carries for one message the gateway sent unasked."""
    return {
        "type": "message",
        "session": session_name,
        "kind": kind,
        "content": text,
        "run_id": run_id,
        "at": time.time(),
    }


def shared(body: Any) -> tuple[str, dict[str, Any]]:
    """The session and item another instance shared (`FEED_PATH`), checked: signed calls come
    only from the cluster's own instances, but a malformed one must not reach a client."""
    if not isinstance(body, dict):
        raise RequestError(400, "a shared feed item is a JSON object", "invalid_request_error")
    name, item = body.get("session"), body.get("item")
    if not isinstance(item, dict) or item.get("type") != "message":
        raise RequestError(400, "a shared feed item needs an item of type message", "bad_item")
    if item.get("session") != name:
        raise RequestError(400, "the item is for another session", "bad_item")
    return session_name(name), item
