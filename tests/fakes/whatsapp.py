"""Wire-level fake of Meta's WhatsApp Cloud API, both ways: the Graph API the gateway calls, and
the webhook deliveries Meta makes to the gateway, signed like Meta's.

Built from the Cloud API reference (Graph API v21.0). The Graph side, under ``/{version}/``:

- ``GET /{phone-number-id}``: ``{"verified_name", "display_phone_number", "quality_rating",
  "id"}`` (the token check).
- ``POST /{phone-number-id}/messages``: ``messaging_product`` must be ``"whatsapp"``;
  ``type`` ``text`` (``text.body`` at most 4096 characters, else code 100) or ``template``
  (a name this fake approved, else code 132001); ``biz_opaque_callback_data`` at most 512
  characters (code 100); ``context.message_id`` quotes a message. Answers
  ``{"messaging_product", "contacts": [{"input", "wa_id"}], "messages": [{"id": "wamid..."}]}``
  and then sends the message's ``sent`` and ``delivered`` status webhooks, echoing its
  ``biz_opaque_callback_data``; a number that is no WhatsApp user gets a ``failed`` status
  with code 131026 instead. A text to a user whose last message is over 24 hours old is
  refused at once with code 131047 (Meta may also report it in a ``failed`` status).
  With ``status: "read"`` and ``message_id`` it marks a message read (``typing_indicator``
  ``{"type": "text"}`` also shows typing): ``{"success": true}``.
- ``GET /{media-id}``: ``{"url", "mime_type", "sha256", "file_size", "id",
  "messaging_product"}``; the url (on this fake, like Meta's lookaside host) wants the same
  bearer token and streams the bytes; an unknown id is code 100.
- Errors are Graph's shape, ``{"error": {"message", "type", "code", "error_subcode",
  "error_data": {"details"}, "fbtrace_id"}}``: a wrong token is HTTP 401 code 190
  (subcode 463, expired); the rate limits are HTTP 400 with codes 130429 (throughput),
  131056 (pair rate) and 80007 (account); `fail_next` queues any of them.

The webhook side: `deliver` POSTs a payload (``{"object": "whatsapp_business_account",
"entry": [{"id", "changes": [{"field": "messages", "value": {"messaging_product",
"metadata": {"display_phone_number", "phone_number_id"}, "contacts", "messages" |
"statuses" | "errors"}}]}]}``) to `webhook_url` with ``X-Hub-Signature-256: sha256=<HMAC-SHA256
of the raw body with the app secret>``. Status webhooks are retried like Meta retries a
delivery not answered 200 (here every 0.2 s, for `status_retry_s`); message deliveries are
sent once per `deliver` call, so a test decides on repeats. `verify` makes Meta's GET
subscription check (``hub.mode``, ``hub.verify_token``, ``hub.challenge``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.server import FakeServer

JSON = dict[str, Any]
VERSION = "v21.0"
TEXT_MAX = 4096
OPAQUE_MAX = 512
WINDOW_S = 24 * 3600
PHONE_NUMBER_ID = "106540352242922"
WABA_ID = "102290129340398"
ERRORS: dict[int, tuple[int, str]] = {  # code -> (HTTP status, message)
    100: (400, "(#100) Invalid parameter"),
    190: (401, "Error validating access token: Session has expired"),
    130429: (400, "(#130429) Rate limit hit"),
    131056: (400, "(#131056) (Business Account, Consumer Account) pair rate limit hit"),
    80007: (400, "(#80007) Rate limit issues"),
    131047: (400, "(#131047) Re-engagement message"),
    131026: (400, "(#131026) Message undeliverable"),
    131000: (500, "(#131000) Something went wrong"),
    2: (503, "(#2) Service temporarily unavailable"),
    132001: (404, "(#132001) Template name does not exist in the translation"),
}


def graph_error(code: int, details: str = "") -> web.Response:
    status, message = ERRORS.get(code, (400, f"(#{code}) error"))
    error: JSON = {
        "message": message,
        "type": "OAuthException",
        "code": code,
        "error_data": {"messaging_product": "whatsapp", "details": details or message},
        "fbtrace_id": "AbCdEfGh123",
    }
    if code == 190:
        error["error_subcode"] = 463
    return web.json_response({"error": error}, status=status)


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class FakeWhatsApp(FakeServer):
    def __init__(
        self,
        token: str = "EAAfaketoken0123456789abcdefXYZ",
        app_secret: str = "fake-app-secret",
        verify_token: str = "fake-verify-token",
    ) -> None:
        super().__init__()
        self.token, self.app_secret, self.verify_token = token, app_secret, verify_token
        self.phone_number_id = PHONE_NUMBER_ID
        self.webhook_url = ""  # the gateway's webhook, set once it runs
        self.users: set[str] = {"15550001111", "15550002222"}  # WhatsApp accounts
        self.templates: set[str] = {"hello_again"}
        self.last_wrote: dict[str, float] = {}  # user -> when they last wrote (the window)
        self.sent: list[JSON] = []  # every message the gateway sent, as posted
        self.attempts: list[JSON] = []  # every send asked for, taken or refused
        self.reads: list[JSON] = []  # every read receipt (and typing indicator)
        self.calls: list[tuple[str, str]] = []  # (method, path) of every Graph call
        self.media: dict[str, tuple[bytes, str]] = {}  # media id -> (bytes, mime type)
        self.media_fetches: list[str] = []
        self.status_deliveries: list[int] = []  # the gateway's answers to status webhooks
        self.status_retry_s = 60.0
        self.unavailable = False  # every Graph call answers 503 (code 2), as in an outage
        self._fail: list[int] = []  # error codes the next sends answer with, in order
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self.app.middlewares.append(self._outage)
        r = self.app.router
        r.add_get(f"/{VERSION}/{{node}}", self._get_node)
        r.add_post(f"/{VERSION}/{{phone}}/messages", self._messages)
        r.add_get("/lookaside/{media_id}", self._download)

    @property
    def api_base(self) -> str:
        return f"{self.url}/"

    # -- the Graph API --------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    @web.middleware
    async def _outage(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.unavailable:
            return graph_error(2)
        return await handler(request)

    async def _get_node(self, request: web.Request) -> web.Response:
        self.calls.append(("GET", request.path))
        if not self._authorized(request):
            return graph_error(190)
        node = request.match_info["node"]
        if node == self.phone_number_id:
            return web.json_response(
                {
                    "verified_name": "Hermes Test",
                    "display_phone_number": "+1 555-010-0000",
                    "quality_rating": "GREEN",
                    "id": node,
                }
            )
        if node in self.media:
            data, mime = self.media[node]
            return web.json_response(
                {
                    "messaging_product": "whatsapp",
                    "url": f"{self.url}/lookaside/{node}?ext=1&hash=abc",
                    "mime_type": mime,
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "file_size": len(data),
                    "id": node,
                }
            )
        return graph_error(100, f"Unsupported get request. Object with ID '{node}' does not exist")

    async def _download(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.Response(status=401, text="Unauthorized")
        media_id = request.match_info["media_id"]
        self.media_fetches.append(media_id)
        data, mime = self.media.get(media_id, (b"", ""))
        if not mime:
            return web.Response(status=404, text="Not found")
        return web.Response(body=data, content_type=mime)

    async def _messages(self, request: web.Request) -> web.Response:
        self.calls.append(("POST", request.path))
        if not self._authorized(request):
            return graph_error(190)
        if request.match_info["phone"] != self.phone_number_id:
            return graph_error(100, "Unsupported post request")
        body = await request.json()
        if body.get("messaging_product") != "whatsapp":
            return graph_error(100, "The parameter messaging_product is required.")
        if body.get("status") == "read":
            self.reads.append(body)
            return web.json_response({"success": True})
        self.attempts.append(body)
        if self._fail:
            return graph_error(self._fail.pop(0))
        return self._accept(body)

    def _accept(self, body: JSON) -> web.Response:
        to, kind = str(body.get("to") or ""), body.get("type")
        opaque = body.get("biz_opaque_callback_data")
        if opaque is not None and (not isinstance(opaque, str) or len(opaque) > OPAQUE_MAX):
            return graph_error(100, "biz_opaque_callback_data must be at most 512 characters")
        if kind == "text":
            text = (body.get("text") or {}).get("body")
            if not isinstance(text, str) or not text or len(text) > TEXT_MAX:
                return graph_error(100, "text.body must be 1 to 4096 characters")
            wrote = self.last_wrote.get(to)
            if to in self.users and (wrote is None or time.time() - wrote > WINDOW_S):
                return graph_error(131047, "More than 24 hours have passed")
        elif kind == "template":
            if (body.get("template") or {}).get("name") not in self.templates:
                return graph_error(132001)
        else:
            return graph_error(100, f"type {kind!r} is not supported by this fake")
        wamid = f"wamid.HBgL{next(self._ids):08d}"
        self.sent.append({**body, "id": wamid})
        self._later(self._statuses(wamid, to, opaque))
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": to, "wa_id": to}],
                "messages": [{"id": wamid}],
            }
        )

    def fail_next(self, *codes: int) -> None:
        """The next sends answer with these Graph error codes, one each."""
        self.call_soon(self._fail.extend, codes)

    # -- webhooks -------------------------------------------------------------------------

    def _later(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _statuses(self, wamid: str, to: str, opaque: str | None) -> None:
        """What Meta reports of a message it took, each retried until the gateway says 200."""
        await asyncio.sleep(0.05)
        if to not in self.users:
            error = {"code": 131026, "title": "Message undeliverable"}
            await self._status(wamid, to, "failed", opaque, [error])
            return
        for status in ("sent", "delivered"):
            await self._status(wamid, to, status, opaque)

    async def _status(
        self, wamid: str, to: str, status: str, opaque: str | None, errors: list[JSON] | None = None
    ) -> None:
        entry: JSON = {"id": wamid, "status": status, "timestamp": str(int(time.time()))}
        entry["recipient_id"] = to
        if opaque is not None:
            entry["biz_opaque_callback_data"] = opaque
        if errors:
            entry["errors"] = errors
        payload = self.envelope({"statuses": [entry]})
        deadline = time.monotonic() + self.status_retry_s
        while time.monotonic() < deadline:
            code = await self._post(payload)
            self.status_deliveries.append(code)
            if code == 200:
                return
            await asyncio.sleep(0.2)

    def envelope(self, value: JSON) -> JSON:
        """A change payload around ``value`` (messages, statuses, contacts or errors)."""
        metadata = {"display_phone_number": "15550100000", "phone_number_id": self.phone_number_id}
        full = {"messaging_product": "whatsapp", "metadata": metadata, **value}
        change = {"field": "messages", "value": full}
        return {
            "object": "whatsapp_business_account",
            "entry": [{"id": WABA_ID, "changes": [change]}],
        }

    async def _post(
        self, payload: JSON | bytes, signature: str | None = None, url: str = ""
    ) -> int:
        raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        headers["X-Hub-Signature-256"] = (
            signature if signature is not None else sign(raw, self.app_secret)
        )
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(url or self.webhook_url, data=raw, headers=headers) as r:
                    await r.read()
                    return r.status
        except (aiohttp.ClientError, OSError):
            return 0  # connection refused: the gateway is down

    def deliver(self, payload: JSON | bytes, signature: str | None = None) -> int:
        """POST one webhook delivery (signed with the app secret unless ``signature`` is
        given); the gateway's HTTP status (0 when it could not be reached)."""
        return self.call(lambda: self._post(payload, signature))

    def message(self, sender: str, kind: str, content: JSON, **extra: Any) -> JSON:
        """An inbound message delivery from ``sender`` (its window opens now)."""
        wamid = extra.pop("id", None) or f"wamid.IN{next(self._ids):08d}"
        message = {"from": sender, "id": wamid, "timestamp": str(int(time.time())), "type": kind}
        message[kind] = content
        message.update(extra)
        contacts = [{"profile": {"name": f"User {sender[-4:]}"}, "wa_id": sender}]
        self.last_wrote[sender] = time.time()
        return self.envelope({"contacts": contacts, "messages": [message]})

    def send_text(self, sender: str, text: str, **extra: Any) -> tuple[str, int]:
        """A text message delivered; (its wamid, the gateway's HTTP status)."""
        payload = self.message(sender, "text", {"body": text}, **extra)
        return wamid_of(payload), self.deliver(payload)

    def add_media(self, media_id: str, data: bytes, mime: str) -> None:
        self.media[media_id] = (data, mime)

    def verify(self, token: str, challenge: str = "1158201444", mode: str = "subscribe") -> Any:
        """Meta's subscription check, as the app dashboard makes it: (status, body)."""
        query = {"hub.mode": mode, "hub.verify_token": token, "hub.challenge": challenge}

        async def get() -> tuple[int, str]:
            async with aiohttp.ClientSession() as session:
                async with session.get(self.webhook_url, params=query) as r:
                    return r.status, await r.text()

        return self.call(get)

    def texts_to(self, user: str) -> list[str]:
        return [m["text"]["body"] for m in self.sent if m.get("to") == user and "text" in m]

    async def on_shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def wamid_of(payload: JSON) -> str:
    return str(payload["entry"][0]["changes"][0]["value"]["messages"][0]["id"])
