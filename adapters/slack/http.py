"""Slack's Events API endpoint (`mode: http`): the request's signature and timestamp are checked
here, on a body the control server has read under its webhook size limit, before slack-bolt
(which logs what it is given) sees anything. Unsigned requests get a 401 and go no further."""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import parse_qsl

import structlog
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from hermes_gateway.platforms import RequestError, loads

log = structlog.get_logger("hermes.adapters.slack")
MAX_SKEW_S = 300  # Slack's own rule: a request older (or newer) than five minutes is a replay


def signature_error(headers: web.BaseRequest, body: bytes, secret: str, now: float) -> str:
    """Why the request is not signed by Slack with ``secret``, or "" when it is."""
    stamp = headers.headers.get("X-Slack-Request-Timestamp", "")
    given = headers.headers.get("X-Slack-Signature", "")
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
        return "missing or malformed timestamp"
    if abs(now - int(stamp)) > MAX_SKEW_S:
        return "stale timestamp"
    base = b"v0:" + stamp.encode() + b":" + body
    wanted = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    if not given.isascii() or not hmac.compare_digest(given, wanted):
        return "bad signature"
    return ""


async def serve_event(
    app: AsyncApp, request: web.Request, secret: str, unstored: set[str]
) -> web.Response:
    """Verify, then let bolt dispatch the event and answer (url_verification, the ack). An
    event whose id the listener put in ``unstored`` (the store could not take it) gets a 503:
    Slack delivers it again."""
    body = await request.read()  # already read by the control server, within its limit
    if reason := signature_error(request, body, secret, time.time()):
        # one sampled line from the control server (a flood of these is counted, not
        # written one by one), with the reason; never the body
        raise RequestError(401, f"not signed by Slack: {reason}", "invalid_signature")
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise RequestError(400, "the request body is not UTF-8", "invalid_body") from None
    _check_json(text, request.headers.get("Content-Type"))
    bolt_request = AsyncBoltRequest(
        body=text,
        query=request.query_string,
        headers=request.headers,  # type: ignore[arg-type]
    )
    response = acked(await app.async_dispatch(bolt_request))
    event_id = _event_id(text)
    if event_id and event_id in unstored:
        unstored.discard(event_id)
        log.warning("slack.event_not_acked", event_id=event_id, reason="store cannot write")
        return web.json_response({"ok": False, "error": "not_stored"}, status=503)
    return await to_aiohttp_response(response)


def _check_json(text: str, content_type: str | None) -> None:
    """Bolt parses the body (or a form's `payload` field) with an unbounded `json.loads`, the
    way `slack_bolt.request.internals.parse_body` picks it: ours goes first, so too deep or not
    JSON is a 400 here, never a RecursionError inside bolt."""
    if not text:
        return
    kind = (content_type or "").partition(";")[0].strip().lower()
    if kind == "application/json" or text.startswith("{"):
        loads(text)
    elif "payload" in text:
        payload = dict(parse_qsl(text, keep_blank_values=True)).get("payload")
        if payload is not None:
            loads(payload)


def _event_id(text: str) -> str:
    try:
        body = loads(text)
    except RequestError:
        return ""
    return str(body.get("event_id") or "") if isinstance(body, dict) else ""


def acked(response: BoltResponse) -> BoltResponse:
    """Bolt's 404 (no listener) and 500 (a payload it choked on) as a plain ack; a 401 (bad
    signature, stale timestamp) and every 2xx stay as they are."""
    if response.status in (404, 500):
        log.info("slack.unhandled_payload_acked", status=response.status)
        return BoltResponse(status=200, body="")
    return response
