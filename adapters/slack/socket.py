"""Slack Socket Mode plumbing: the handler that acks each envelope once bolt has run its
listener (and leaves unacked the events the store could not take), waiting for one of the
app's socket slots in a cluster, and frame helpers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from adapters.slack.http import acked
from hermes_gateway.platforms import Leadership

log = structlog.get_logger("hermes.adapters.slack")
STANDBY_AFTER_S = 1.0  # a slot not had within this long: this instance stands by meanwhile


class AckingSocketHandler(AsyncSocketModeHandler):
    """Acks every envelope once bolt ran its listener, also the ones bolt cannot handle (a
    malformed payload, a slash command we have no listener for): Slack's retries of those would
    fail the same way. Not acked: an event whose id the adapter put in ``unstored`` (the store
    could not take it), so that Slack delivers it again."""

    unstored: set[str]  # the adapter's set, given right after construction

    async def handle(self, client: Any, req: Any) -> None:
        try:
            response = await self.app.async_dispatch(bolt_request(req))
        except Exception:
            log.exception("slack.dispatch_failed", envelope_type=getattr(req, "type", ""))
            response = BoltResponse(status=500, body="")
        payload = req.payload if isinstance(req.payload, dict) else {}
        event_id = str(payload.get("event_id") or "")
        if event_id and event_id in self.unstored:
            self.unstored.discard(event_id)
            # not acked: Slack delivers it again (with retry_attempt) a few times
            log.warning("slack.event_not_acked", event_id=event_id, reason="store cannot write")
            return
        await send_response(client, req, acked(response))


def bolt_request(req: SocketModeRequest) -> AsyncBoltRequest:
    """The envelope as bolt's request, with Slack's retry headers as in HTTP mode (bolt's own
    Socket Mode glue does the same, in a module it calls internal)."""
    headers: dict[str, str | Sequence[str]] = {}
    if req.retry_attempt is not None:
        headers["x-slack-retry-num"] = str(req.retry_attempt)
    if req.retry_reason is not None:
        headers["x-slack-retry-reason"] = req.retry_reason
    return AsyncBoltRequest(mode="socket_mode", body=req.payload, headers=headers or None)


async def send_response(client: Any, req: SocketModeRequest, response: BoltResponse) -> None:
    """The ack, carrying bolt's answer (a JSON body as the payload, text as ``text``); a
    non-200 answer (a 401) is logged and left unacked, as bolt's own glue does."""
    if response.status != 200:
        log.info("slack.envelope_not_acked", status=response.status)
        return
    body = response.body
    if not body:
        payload: dict[str, Any] | None = None
    elif response.headers.get("content-type", [""])[0].startswith("application/json"):
        payload = json.loads(body)
    else:
        payload = {"text": body}
    await client.send_socket_mode_response(
        SocketModeResponse(envelope_id=req.envelope_id, payload=payload)
    )


async def take_slot(slot: Leadership, standing_by: Callable[[bool], None]) -> None:
    """Return once this instance holds one of the app's socket slots (at once on one process).
    If none is free within a moment, ``standing_by(True)`` says so until one is."""
    acquiring = asyncio.ensure_future(slot.acquire())
    try:
        await asyncio.wait({acquiring}, timeout=STANDBY_AFTER_S)
        if not acquiring.done():
            standing_by(True)
            log.info("slack.socket_standby")
        await acquiring
    finally:
        acquiring.cancel()
        standing_by(False)


async def close_socket(handler: AsyncSocketModeHandler) -> None:
    try:
        await handler.close_async()  # type: ignore[no-untyped-call]
    except Exception as exc:  # closing a half-open socket must not break shutdown
        log.debug("slack.socket_close_failed", error=str(exc))


def frame_type(data: Any) -> str:
    if not isinstance(data, str) or len(data) > 4096:  # hello/disconnect frames are small
        return ""
    try:
        frame = json.loads(data)
    except ValueError:
        return ""
    return str(frame.get("type") or "") if isinstance(frame, dict) else ""
