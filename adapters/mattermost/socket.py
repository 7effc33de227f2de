"""Mattermost's WebSocket (``/api/v4/websocket``): the ``authentication_challenge``, the
``hello``, then events numbered by ``seq`` from 0 per connection; a number skipped means the
server dropped events, which the adapter answers with a catch-up."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from hermes_gateway.platforms import AdapterAuthError, TransientAdapterError

log = structlog.get_logger("hermes.adapters.mattermost")
CHALLENGE_SEQ = 1
MAX_FRAME = 8 * 1024 * 1024  # a post is at most 64 K characters; its event a little more


def socket_url(url: str) -> str:
    """The WebSocket's address on the server ``url`` (http -> ws, https -> wss)."""
    base = url.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    elif base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    return base + "/api/v4/websocket"


@dataclass(frozen=True, slots=True)
class Frame:
    """One event off the socket, and whether events before it were missed (a ``seq`` gap)."""

    event: dict[str, Any]
    gap: bool = False


async def open_socket(
    http: aiohttp.ClientSession, url: str, token: str, heartbeat: float, timeout: float
) -> aiohttp.ClientWebSocketResponse:
    """Connect and authenticate; returns once the server said ``hello``. A refused token is
    `AdapterAuthError`; anything else (no hello in time, a closed socket) is transient."""
    ws = await http.ws_connect(
        socket_url(url),
        heartbeat=heartbeat,
        max_msg_size=MAX_FRAME,
        timeout=aiohttp.ClientWSTimeout(ws_close=5),
    )
    try:
        challenge = {
            "seq": CHALLENGE_SEQ,
            "action": "authentication_challenge",
            "data": {"token": token},
        }
        await ws.send_str(json.dumps(challenge))
        async with asyncio.timeout(timeout):
            while True:
                frame = _parse(await ws.receive())
                if frame.get("seq_reply") == CHALLENGE_SEQ and frame.get("status") != "OK":
                    error = frame.get("error")
                    why = error.get("message") if isinstance(error, dict) else None
                    raise AdapterAuthError(f"websocket: Mattermost rejected the token ({why})")
                if frame.get("event") == "hello":
                    return ws
    except TimeoutError:
        await ws.close()
        raise TransientAdapterError("websocket: no hello from the server in time") from None
    except BaseException:
        await ws.close()
        raise


async def frames(ws: aiohttp.ClientWebSocketResponse) -> AsyncIterator[Frame]:
    """The events of a live socket (after its hello, seq 0) until it closes; unreadable
    frames are logged and skipped."""
    expected = 1
    while True:
        message = await ws.receive()
        if message.type in (
            aiohttp.WSMsgType.CLOSE,
            aiohttp.WSMsgType.CLOSING,
            aiohttp.WSMsgType.CLOSED,
        ):
            log.info("mattermost.socket_closed", code=ws.close_code)
            return
        if message.type == aiohttp.WSMsgType.ERROR:
            log.warning("mattermost.socket_error", error=str(ws.exception()))
            return
        frame = _parse(message)
        if "event" not in frame:
            continue  # a reply to one of our actions, or an unreadable frame
        seq = frame.get("seq")
        gap = False
        if isinstance(seq, int) and not isinstance(seq, bool):
            gap = seq > expected
            if gap:
                log.warning("mattermost.events_missed", expected=expected, got=seq)
            expected = max(expected, seq + 1)
        yield Frame(frame, gap)


def _parse(message: aiohttp.WSMessage) -> dict[str, Any]:
    if message.type in (
        aiohttp.WSMsgType.CLOSE,
        aiohttp.WSMsgType.CLOSING,
        aiohttp.WSMsgType.CLOSED,
    ):
        raise TransientAdapterError("websocket: closed by the server")
    if message.type != aiohttp.WSMsgType.TEXT:
        return {}
    try:
        frame = json.loads(message.data)
    except ValueError:
        log.warning("mattermost.frame_unreadable", size=len(message.data))
        return {}
    if not isinstance(frame, dict):
        log.warning("mattermost.frame_unreadable", size=len(message.data))
        return {}
    return frame
