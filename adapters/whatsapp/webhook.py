"""The webhook's two gates on the control port: Meta's subscription check (GET with
``hub.mode=subscribe``, ``hub.verify_token`` and ``hub.challenge``, answered with the challenge
only for our verify token), and the signature of every delivery (``X-Hub-Signature-256``: the
HMAC-SHA256 of the raw body with the app secret), checked on the bytes the control server read
under its webhook size limit, before anything parses them."""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web

from hermes_gateway.platforms import RequestError

SIGNATURE_HEADER = "X-Hub-Signature-256"
CHALLENGE_MAX = 256  # Meta's challenge is a short number; anything longer is not Meta


def signature_error(header: str | None, body: bytes, app_secret: str) -> str:
    """Why ``body`` is not signed with ``app_secret``, or "" when it is."""
    if not header:
        return "no signature"
    scheme, _, given = header.partition("=")
    if scheme != "sha256" or not given.isascii():
        return "malformed signature"
    wanted = hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.lower(), wanted):
        return "bad signature"
    return ""


async def signed_body(request: web.Request, app_secret: str) -> bytes:
    """The raw body, if Meta signed it; else a 401 with nothing of it parsed or logged."""
    body = await request.read()  # read by the control server already, within its limit
    if reason := signature_error(request.headers.get(SIGNATURE_HEADER), body, app_secret):
        raise RequestError(401, f"not signed by Meta: {reason}", "invalid_signature")
    return body


def challenge(request: web.Request, verify_token: str) -> web.Response:
    """Meta's subscription check: the challenge echoed for our verify token, 403 otherwise."""
    query = request.query
    given = query.get("hub.verify_token", "")
    mode, echo = query.get("hub.mode"), query.get("hub.challenge", "")
    same = hmac.compare_digest(given.encode(), verify_token.encode())
    if mode != "subscribe" or not verify_token or not same:
        raise RequestError(403, "wrong verify token or mode", "verification_failed")
    if not echo or len(echo) > CHALLENGE_MAX or not echo.isprintable():
        raise RequestError(400, "no usable hub.challenge", "invalid_request")
    return web.Response(text=echo, content_type="text/plain")
