"""The daemon's event stream, ``GET /api/v1/events`` (Server-Sent Events): each event has an
id, and a reconnect with ``Last-Event-ID`` first gets the events after it (signal-cli keeps
the last 1000), so what arrived while the gateway was away is not lost."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from adapters.signal.rpc import EVENTS_PATH, Daemon
from hermes_gateway.platforms import RequestError, TransientAdapterError, loads

MAX_EVENT_BYTES = 4 * 1024 * 1024  # one envelope; longer lines are an error of the stream


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: its id (the cursor), its type and its data as sent."""

    id: str
    kind: str
    data: str


def envelope(data: str) -> Any:
    """The ``envelope`` of a ``receive`` event's data: the notification's params as they are,
    or wrapped in a JSON-RPC notification (with a subscription's ``result``); None when the
    data holds none (then it is logged and skipped)."""
    try:
        body = loads(data)
    except RequestError:
        return None
    if isinstance(body, dict) and isinstance(body.get("params"), dict):
        body = body["params"]
    if isinstance(body, dict) and isinstance(body.get("result"), dict):
        body = body["result"]
    return body.get("envelope") if isinstance(body, dict) else None


async def events(daemon: Daemon, cursor: str, opened: Callable[[], None]) -> AsyncIterator[Event]:
    """The events after ``cursor`` ("" for from now on), until the stream ends (raises
    `TransientAdapterError`: the supervisor connects again); ``opened()`` once it is open."""
    headers = {"Accept": "text/event-stream"}
    if cursor:
        headers["Last-Event-ID"] = cursor
    url = daemon.base_url + EVENTS_PATH
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    try:
        async with daemon.stream_session().get(url, headers=headers, timeout=timeout) as resp:
            if resp.status != 200:
                raise TransientAdapterError(f"signal-cli events: HTTP {resp.status}")
            opened()
            async for event in _parse(resp.content):
                yield event
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise TransientAdapterError(f"signal-cli events: {str(exc) or type(exc).__name__}") from exc
    raise TransientAdapterError("signal-cli events: the stream ended")


async def _parse(content: aiohttp.StreamReader) -> AsyncIterator[Event]:
    """The SSE wire format: ``field: value`` lines, an event ended by a blank line; comments
    (``:``) are keep-alives."""
    event_id, kind, data = "", "message", list[str]()
    while line := await content.readline():
        if len(line) > MAX_EVENT_BYTES:
            raise ValueError("an event line is too long")
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        if not text:
            if data:
                yield Event(event_id, kind, "\n".join(data))
            kind, data = "message", []
            continue
        name, _, value = text.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "id":
            event_id = value
        elif name == "event":
            kind = value
        elif name == "data":
            data.append(value)
