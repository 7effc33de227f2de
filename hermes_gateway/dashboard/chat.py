"""The Chat page's way to the agent: the local API (`POST /v1/chat/completions`, streamed) on
this gateway's own control port, with the control token added here, so the browser holds only
its dashboard cookie and the page's messages take the same path as any API client's."""

from __future__ import annotations

from typing import Any

import aiohttp
import structlog
from aiohttp import web

from hermes_gateway.errors import RequestError
from hermes_gateway.text.jsonbody import read_json

log = structlog.get_logger("hermes.dashboard")
SESSION_USER = "dashboard"  # the session the Chat page talks in: api:dm:dashboard
MAX_CHARS = 32_000


def _client_host(host: str) -> str:
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


async def chat_text(request: web.Request) -> str:
    body = await read_json(request)
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise RequestError(400, "'text' is required", "invalid_text")
    if len(text) > MAX_CHARS:
        raise RequestError(413, f"a message is at most {MAX_CHARS} characters", "too_long")
    return text


async def relay(
    request: web.Request, host: str, port: int, token: str | None
) -> web.StreamResponse:
    """Send the page's message to the local API and pass its event stream through as it is."""
    text = await chat_text(request)
    payload: dict[str, Any] = {
        "model": "hermes",
        "user": SESSION_USER,
        "stream": True,
        "messages": [{"role": "user", "content": text}],
    }
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"http://{_client_host(host)}:{port}/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=900)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, json=payload, headers=headers) as upstream,
    ):
        if upstream.status != 200:
            detail = (await upstream.text())[:2000]
            return web.Response(
                status=upstream.status, text=detail, content_type="application/json"
            )
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        try:
            async for piece in upstream.content.iter_any():
                await response.write(piece)
        except ConnectionError:  # the page went away: the answer is in the session's history
            log.info("dashboard.chat_client_gone")
        return response
