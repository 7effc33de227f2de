"""Slack Socket Mode plumbing: the handler that acks each envelope once bolt has run its
listener (and leaves unacked the events the store could not take), and frame helpers."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app, send_async_response
from slack_bolt.response import BoltResponse

from adapters.slack_http import acked

log = structlog.get_logger("hermes.adapters.slack")


class AckingSocketHandler(AsyncSocketModeHandler):
    """Acks every envelope once bolt ran its listener, also the ones bolt cannot handle (a
    malformed payload, a slash command we have no listener for): Slack's retries of those would
    fail the same way. Not acked: an event whose id the adapter put in ``unstored`` (the store
    could not take it), so that Slack delivers it again."""

    unstored: set[str]  # the adapter's set, given right after construction

    async def handle(self, client: Any, req: Any) -> None:
        started = time.time()
        try:
            response = await run_async_bolt_app(self.app, req)
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
        await send_async_response(client, req, acked(response), started)


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
