"""A fake Slack (Web API + Socket Mode) for driving the real slack-bolt / slack-sdk offline.

Socket Mode as Slack runs it for an app with several connections open: each event goes to one
of them (in turn), and an envelope not acked in time is delivered again, with retry_attempt,
possibly on another connection (`FakeSlack.redeliver_after_s`; off by default).
Also delivers signed Events API POSTs for HTTP mode (`FakeSlack.post_event`, `sign_request`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web

from tests.fakes.server import FakeServer, chunked_response

JsonDict = dict[str, Any]
_CALLER: ContextVar[str] = ContextVar("caller", default="")  # see FakeSlack.api_base_as

MAX_RETRIES = 3  # Slack retries an unacknowledged event up to three times
MAX_TEXT = 40_000  # chat.postMessage / chat.update: Slack answers msg_too_long past this
_JSON_FIELDS = ("blocks", "attachments", "metadata")  # JSON-encoded strings in form bodies
_CHANNEL_TYPES = {"D": "im", "G": "mpim", "C": "channel"}


class SlackApiFailure(Exception):
    """Raised by a Web API method handler; answered as ``{"ok": false, "error": code}``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def sign_request(secret: str, body: bytes, timestamp: int) -> dict[str, str]:
    """The headers Slack adds to an Events API POST: ``v0=HMAC_SHA256(secret, "v0:ts:body")``."""
    base = b"v0:" + str(timestamp).encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(timestamp), "X-Slack-Signature": f"v0={digest}"}


# -- payload factories (public: tests may build raw events with them) -------------------------


def channel_type_for(channel: str) -> str:
    """Slack's channel_type from the id prefix (D: im, G: mpim, C: channel)."""
    return _CHANNEL_TYPES.get(channel[:1], "channel")


def make_message_event(text: str, user: str, channel: str, ts: str, **fields: Any) -> JsonDict:
    """A ``message`` event. ``fields`` (None values dropped): thread_ts, files, subtype, bot_id,
    client_msg_id, channel_type, team. Only messages typed by a person get a client_msg_id."""
    extra = {k: v for k, v in fields.items() if v is not None}
    if extra.get("files"):
        extra.setdefault("subtype", "file_share")
        extra["upload"] = False
    if "bot_id" not in extra and extra.get("subtype", "file_share") == "file_share":
        extra.setdefault("client_msg_id", str(uuid.uuid4()))
    event = {"type": "message", "user": user, "text": text, "ts": ts, "team": "T0TEAM"}
    event.update(channel=channel, event_ts=ts, channel_type=channel_type_for(channel))
    return {**event, **extra}


def make_app_mention_event(text: str, user: str, channel: str, ts: str, **fields: Any) -> JsonDict:
    """An ``app_mention`` event; unlike the paired ``message`` event it has no channel_type."""
    extra = {k: v for k, v in fields.items() if v is not None}
    event = {"type": "app_mention", "user": user, "text": text, "ts": ts, "team": "T0TEAM"}
    event.update(client_msg_id=str(uuid.uuid4()), channel=channel, event_ts=ts)
    return {**event, **extra}


def make_event_callback(
    event: JsonDict,
    *,
    team_id: str = "T0TEAM",
    bot_user_id: str = "U0BOT",
    api_app_id: str = "A0FAKEAPP",
    event_id: str | None = None,
) -> JsonDict:
    """The ``event_callback`` body that both Socket Mode envelopes and HTTP mode POSTs carry."""
    event_ts = event.get("event_ts") or event.get("ts")
    auth = {"enterprise_id": None, "team_id": team_id, "user_id": bot_user_id, "is_bot": True}
    return {
        "token": "fake-verification-token",
        "team_id": team_id,
        "context_team_id": team_id,
        "api_app_id": api_app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(float(event_ts)) if event_ts else int(time.time()),
        "authorizations": [{**auth, "is_enterprise_install": False}],
        "is_ext_shared_channel": False,
    }


def make_url_verification(challenge: str = "challenge-abc123") -> JsonDict:
    return {"token": "fake-verification-token", "challenge": challenge, "type": "url_verification"}


def make_envelope(
    payload: JsonDict, *, type: str = "events_api", retry_attempt: int = 0, retry_reason: str = ""
) -> JsonDict:
    """A Socket Mode envelope; the app must ack it with ``{"envelope_id": ...}``."""
    return {
        "envelope_id": str(uuid.uuid4()),
        "payload": payload,
        "type": type,
        "accepts_response_payload": type != "events_api",
        "retry_attempt": retry_attempt,
        "retry_reason": retry_reason,
    }


def make_file(file_id: str, name: str, url_private: str, mimetype: str, size: int) -> JsonDict:
    """A file object as in ``event.files`` and ``files.info``."""
    now = int(time.time())
    return {
        **{"id": file_id, "created": now, "timestamp": now, "name": name, "title": name},
        **{"mimetype": mimetype, "filetype": name.rsplit(".", 1)[-1], "size": size},
        **{"mode": "hosted", "is_external": False, "user": "U123", "url_private": url_private},
        "url_private_download": f"{url_private}?download=1",
    }


# -- the fake -----------------------------------------------------------------------------------


class FakeSlack(FakeServer):
    """Slack's Web API under ``/api/`` and Socket Mode under ``/link/``, on 127.0.0.1.

    Use ``AsyncApp(client=AsyncWebClient(token=..., base_url=fake.api_base))``. The observed
    lists are appended to on the fake's thread and may be read from any thread.
    """

    def __init__(
        self,
        bot_token: str = "xoxb-fake",
        app_token: str = "xapp-fake",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
        team_id: str = "T0TEAM",
        api_app_id: str = "A0FAKEAPP",
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.bot_token, self.app_token, self.api_app_id = bot_token, app_token, api_app_id
        self.bot_user_id, self.bot_id, self.team_id = bot_user_id, bot_id, team_id
        self.calls: list[tuple[str, JsonDict]] = []
        self.posted: list[JsonDict] = []
        self.scopes: list[str] | None = None  # the bot token's scopes, when set: x-oauth-scopes
        self.reactions: list[tuple[str, str, str, str]] = []
        self.acks: list[tuple[str, float]] = []
        self.envelopes: list[JsonDict] = []  # every envelope written to a socket, in order
        self.delivered_on: dict[str, int] = {}  # envelope id: the connection (1, 2...) it went to
        self.opened_by: dict[int, str] = {}  # connection: who opened it (see `api_base_as`)
        self.connections = 0  # sockets opened so far
        self.peak_connections = 0  # most sockets open at once
        # an envelope not acked this long after it was written is delivered again (None: never)
        self.redeliver_after_s: float | None = None
        self.users: dict[str, JsonDict] = {}  # per-id overrides merged into users.info
        self.channels: dict[str, JsonDict] = {}  # per-id overrides merged into conversations.info
        self.files: dict[str, JsonDict] = {}
        self.downloads: list[JsonDict] = []  # url_private requests: path, authorization, status
        # Slack answers an unauthorized url_private with its sign-in page (200, HTML); by
        # default the fake answers 401 (no token) / 403 (a wrong one) instead
        self.signin_page = False
        self._file_bodies: dict[str, bytes] = {}
        self._chunked: set[str] = set()
        self._download_faults: deque[int] = deque()
        self._failures: defaultdict[str, deque[tuple[int, float, str | None]]] = defaultdict(deque)
        self._reacted: set[tuple[str, str, str]] = set()
        self._known: set[tuple[str, str]] = set()  # (channel, ts) of every message seen
        self._sockets: dict[web.WebSocketResponse, asyncio.Transport | None] = {}
        self._numbers: dict[web.WebSocketResponse, int] = {}
        self._live: list[web.WebSocketResponse] = []  # said hello, not told to disconnect
        self._turn = itertools.count()
        self._pending: deque[JsonDict] = deque()
        self._sent_at: dict[str, float] = {}
        self._acked: set[str] = set()
        self._retries: set[asyncio.Task[None]] = set()
        self._counter = itertools.count(1)
        self._ts_base = int(time.time())  # ts near "now", so age checks on ts behave
        self._methods: dict[str, Callable[[JsonDict], JsonDict]] = {
            "apps.connections.open": self._connections_open,
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.delete": self._delete,
            "reactions.add": lambda params: self._react(params, add=True),
            "reactions.remove": lambda params: self._react(params, add=False),
            "conversations.info": self._conversation_info,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
            "users.info": self._user_info,
            "files.info": self._file_info,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
            "assistant.threads.setStatus": lambda params: {},
        }
        self.app.router.add_route("*", "/api/{method}", self._api)
        self.app.router.add_route("*", "/as/{caller}/api/{method}", self._api_as)
        self.app.router.add_get("/link/", self._socket)
        self.app.router.add_get("/files-pri/{file_id}/{name}", self._download)
        self.app.router.add_post("/upload/{file_id}", self._receive_upload)
        # files_upload_v2's flow: a file named, its bytes posted, then shared in a message
        self._uploading: dict[str, JsonDict] = {}
        self.uploads: list[JsonDict] = []  # shared files: filename, data, channel, thread_ts

    def start(self) -> FakeSlack:
        super().start()
        return self

    def __enter__(self) -> FakeSlack:
        return self.start()

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/"  # the trailing slash matters: the SDK urljoin()s method names

    def api_base_as(self, caller: str) -> str:
        """The Web API under a name of the caller's (one gateway instance of several): the
        sockets it opens are recorded in `opened_by`, so a test knows whose they are."""
        return f"{self.url}/as/{caller}/api/"

    def delivered_to(self, envelope_id: str) -> str:
        """Who opened the connection ``envelope_id`` was written to."""
        return self.opened_by.get(self.delivered_on.get(envelope_id, 0), "")

    @property
    def connected(self) -> bool:
        """True once a socket has said hello and takes envelopes (False after disconnect())."""
        return self.live_connections > 0

    @property
    def live_connections(self) -> int:
        """Sockets taking envelopes now."""
        return sum(1 for ws in list(self._live) if not ws.closed)

    def next_ts(self) -> str:
        """A fresh, increasing message ts ("1700000000.000100" style)."""
        n = next(self._counter)
        return f"{self._ts_base + n // 10_000}.{(n % 10_000) * 100:06d}"

    # -- observing -------------------------------------------------------------------------

    def messages_in(self, channel: str, thread_ts: str | None = None) -> list[JsonDict]:
        """Posted, not deleted messages in ``channel``; only that thread's replies if thread_ts."""
        return [
            m
            for m in self.posted
            if m["channel"] == channel
            and not m.get("deleted")
            and (thread_ts is None or m.get("thread_ts") == thread_ts)
        ]

    def calls_to(self, method: str) -> list[JsonDict]:
        return [params for name, params in self.calls if name == method]

    def fail_next(
        self,
        method: str,
        status: int = 429,
        retry_after: float = 1,
        error: str | None = None,
        times: int = 1,
    ) -> None:
        """Fail the next ``times`` calls: 429 + Retry-After, 5xx, or 200 with ok:false + error."""
        for _ in range(times):
            self._failures[method].append((status, retry_after, error))

    # -- injecting (Socket Mode) -----------------------------------------------------------

    def send_message(
        self,
        text: str = "hi",
        user: str = "U123",
        channel: str = "D123",
        channel_type: str | None = None,
        ts: str | None = None,
        thread_ts: str | None = None,
        files: list[JsonDict] | None = None,
        subtype: str | None = None,
        bot_id: str | None = None,
        client_msg_id: str | None = None,
    ) -> JsonDict:
        """A ``message`` event; channel_type follows the channel id unless given."""
        fields = {"thread_ts": thread_ts, "files": files, "subtype": subtype, "bot_id": bot_id}
        fields.update(client_msg_id=client_msg_id, channel_type=channel_type, team=self.team_id)
        ts = ts or self.next_ts()
        return self.send_event(make_message_event(text, user, channel, ts, **fields))

    def send_mention(
        self,
        text: str = "<@U0BOT> hi",
        user: str = "U123",
        channel: str = "C123",
        ts: str | None = None,
        thread_ts: str | None = None,
    ) -> JsonDict:
        """``app_mention`` then the ``message`` with the same ts, as Slack sends them."""
        ts = ts or self.next_ts()
        fields = {"thread_ts": thread_ts, "team": self.team_id}
        payload = self.send_event(make_app_mention_event(text, user, channel, ts, **fields))
        msg_id = payload["event"]["client_msg_id"]
        self.send_message(text, user, channel, ts=ts, thread_ts=thread_ts, client_msg_id=msg_id)
        return payload

    def send_event(
        self,
        event: JsonDict,
        *,
        event_id: str | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> JsonDict:
        """Deliver any event; returns its event_callback payload. Same event_id + retry_attempt=1
        is Slack's retried delivery (retry_reason defaults to "timeout" then)."""
        payload = self.event_callback(event, event_id=event_id)
        if retry_attempt and not retry_reason:
            retry_reason = "timeout"
        self.send_envelope(payload, retry_attempt=retry_attempt, retry_reason=retry_reason)
        return payload

    def send_envelope(self, payload: JsonDict, **envelope_fields: Any) -> JsonDict:
        """Send any envelope (type events_api, slash_commands, interactive: see `make_envelope`);
        it waits in a queue while no socket is connected, as Slack holds undelivered events."""
        envelope = make_envelope(payload, **envelope_fields)
        self.call(lambda: self._deliver(envelope))
        return envelope

    def event_callback(self, event: JsonDict, event_id: str | None = None) -> JsonDict:
        ids = {"team_id": self.team_id, "bot_user_id": self.bot_user_id}
        return make_event_callback(event, **ids, api_app_id=self.api_app_id, event_id=event_id)

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the app to reconnect (every live socket). Later events wait for a new socket; the
        old one stays open until the client closes it (Slack closes it some seconds later)."""

        async def go() -> None:
            sockets, self._live = self._live, []
            for ws in sockets:
                if not ws.closed:
                    await ws.send_json({"type": "disconnect", "reason": reason, "debug_info": {}})

        self.call(go)

    def drop_socket(self) -> None:
        """Kill the live sockets without a close frame; the SDK notices on its next ping tick."""

        async def go() -> None:
            sockets, self._live = self._live, []
            for ws in sockets:
                transport = self._sockets.get(ws)
                if transport is not None:
                    transport.abort()

        self.call(go)

    def add_file(
        self,
        name: str = "notes.txt",
        content: bytes = b"hello",
        mimetype: str = "text/plain",
        *,
        size: int | None = None,
        chunked: bool = False,
    ) -> JsonDict:
        """Register a file for ``files.info`` and url_private downloads; pass it to send_message.
        ``size`` overrides the announced size; ``chunked`` serves it without a Content-Length."""
        file_id = f"F{next(self._counter):08d}"
        url = f"{self.url}/files-pri/{self.team_id}-{file_id}/{name}"
        announced = len(content) if size is None else size
        self.files[file_id] = make_file(file_id, name, url, mimetype, announced)
        self._file_bodies[file_id] = content
        if chunked:
            self._chunked.add(file_id)
        return self.files[file_id]

    def fail_download_next(self, status: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` url_private downloads with ``status``."""
        self._download_faults.extend([status] * times)

    # -- injecting (HTTP mode) -------------------------------------------------------------

    def post_event(
        self,
        url: str,
        event_or_payload: JsonDict,
        signing_secret: str = "s3cret",
        timestamp: int | None = None,
        bad_signature: bool = False,
        retry_attempt: int = 0,
    ) -> tuple[int, str]:
        """POST a signed event (or a full payload) to the app; returns (status, body text).

        It blocks: from an async test whose loop serves the app, use ``asyncio.to_thread`` or
        `post_event_async`. timestamp defaults to now; retry_attempt adds X-Slack-Retry-Num.
        """
        args = (signing_secret, timestamp, bad_signature, retry_attempt)
        body, headers = self._signed(event_or_payload, *args)
        return self.call(lambda: _post(url, body, headers))

    async def post_event_async(
        self, url: str, event_or_payload: JsonDict, **kwargs: Any
    ) -> tuple[int, str]:
        """Like `post_event` (same keyword arguments), but on the caller's loop."""
        return await _post(url, *self._signed(event_or_payload, **kwargs))

    def _signed(
        self,
        event_or_payload: JsonDict,
        signing_secret: str = "s3cret",
        timestamp: int | None = None,
        bad_signature: bool = False,
        retry_attempt: int = 0,
    ) -> tuple[bytes, dict[str, str]]:
        payload = event_or_payload
        if payload.get("type") not in ("event_callback", "url_verification"):
            payload = self.event_callback(payload)  # a bare event
        self._remember(payload)
        body = json.dumps(payload).encode()
        secret = signing_secret + ("-wrong" if bad_signature else "")
        headers = sign_request(secret, body, timestamp or int(time.time()))
        headers["Content-Type"] = "application/json"
        if retry_attempt:
            headers["X-Slack-Retry-Num"] = str(retry_attempt)
            headers["X-Slack-Retry-Reason"] = "http_timeout"
        return body, headers

    # -- Socket Mode -----------------------------------------------------------------------

    def _remember(self, payload: JsonDict) -> None:
        event = payload.get("event") or {}
        if "channel" in event and "ts" in event:  # so reactions.add on it succeeds
            self._known.add((event["channel"], event["ts"]))

    async def _deliver(self, envelope: JsonDict) -> None:
        self._remember(envelope["payload"])
        live = [ws for ws in self._live if not ws.closed]
        if not live:
            self._pending.append(envelope)
        else:  # one connection per event, in turn
            await self._write(live[next(self._turn) % len(live)], envelope)

    async def _write(self, ws: web.WebSocketResponse, envelope: JsonDict) -> None:
        envelope_id = envelope["envelope_id"]
        self._sent_at[envelope_id] = time.monotonic()
        try:
            await ws.send_json(envelope)
        except (ConnectionError, RuntimeError):
            self._pending.appendleft(envelope)  # the socket died under us: keep it for the next
            return
        self.envelopes.append(envelope)
        self.delivered_on[envelope_id] = self._numbers.get(ws, 0)
        if self.redeliver_after_s is not None and envelope["retry_attempt"] < MAX_RETRIES:
            task = asyncio.create_task(self._retry(envelope, self.redeliver_after_s))
            self._retries.add(task)
            task.add_done_callback(self._retries.discard)

    async def _retry(self, envelope: JsonDict, after: float) -> None:
        """Slack's retry of an envelope nobody acked: a new envelope, the same payload."""
        await asyncio.sleep(after)
        if envelope["envelope_id"] in self._acked:
            return
        attempt = envelope["retry_attempt"] + 1
        await self._deliver(
            make_envelope(
                envelope["payload"],
                type=envelope["type"],
                retry_attempt=attempt,
                retry_reason="timeout",
            )
        )

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        # autoping answers the SDK's "sdk-ping-pong:<t>" pings; the short timeout bounds close().
        ws = web.WebSocketResponse(autoping=True, timeout=0.5)
        await ws.prepare(request)
        self.connections += 1
        self._sockets[ws] = request.transport
        self._numbers[ws] = self.connections
        self.opened_by[self.connections] = request.query.get("caller", "")
        self.peak_connections = max(self.peak_connections, len(self._sockets))
        try:
            await ws.send_json(self._hello())
            while self._pending:  # events injected meanwhile join this queue, so order holds
                await self._write(ws, self._pending.popleft())
            self._live.append(ws)
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_frame(msg.data)
        finally:
            self._sockets.pop(ws, None)
            if ws in self._live:
                self._live.remove(ws)
        return ws

    def _hello(self) -> JsonDict:
        return {
            "type": "hello",
            "num_connections": len(self._sockets),
            "debug_info": {"host": "fake-applink", "approximate_connection_time": 18060},
            "connection_info": {"app_id": self.api_app_id},
        }

    def _on_frame(self, data: str) -> None:
        envelope_id = json.loads(data).get("envelope_id")
        if envelope_id:
            self._acked.add(envelope_id)
            sent = self._sent_at.get(envelope_id, time.monotonic())
            self.acks.append((envelope_id, time.monotonic() - sent))

    async def on_shutdown(self) -> None:
        self._live = []
        for task in list(self._retries):
            task.cancel()
        closes = [ws.close(code=WSCloseCode.GOING_AWAY) for ws in list(self._sockets)]
        await asyncio.gather(*closes, return_exceptions=True)  # concurrent, 0.5 s at most each

    # -- Web API ---------------------------------------------------------------------------

    async def _api_as(self, request: web.Request) -> web.Response:
        _CALLER.set(request.match_info["caller"])
        return await self._api(request)

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _read_params(request)
        self.calls.append((method, params))
        if self._failures[method]:
            return _injected_failure(*self._failures[method].popleft())
        handler = self._methods.get(method)
        if handler is None:
            return _fail("unknown_method")
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ").strip() or params.get("token")
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            return _fail("invalid_auth" if token else "not_authed")
        try:
            response = web.json_response({"ok": True, **handler(params)})
        except SlackApiFailure as exc:
            return _fail(exc.code)
        if self.scopes is not None:  # Slack lists the token's scopes on every answer
            response.headers["x-oauth-scopes"] = ",".join(self.scopes)
        return response

    def _connections_open(self, params: JsonDict) -> JsonDict:
        query = f"ticket={uuid.uuid4().hex}&app_id={self.api_app_id}&caller={_CALLER.get()}"
        return {"url": f"ws://127.0.0.1:{self.port}/link/?{query}"}

    def _auth_test(self, params: JsonDict) -> JsonDict:
        return {
            **{"url": "https://fake.slack.com/", "team": "Fake Team", "user": "hermes"},
            **{"team_id": self.team_id, "user_id": self.bot_user_id, "bot_id": self.bot_id},
            "is_enterprise_install": False,
        }

    def _post_message(self, params: JsonDict) -> JsonDict:
        channel, text = params.get("channel"), params.get("text") or ""
        if not channel:
            raise SlackApiFailure("channel_not_found")
        if not text and not params.get("blocks") and not params.get("attachments"):
            raise SlackApiFailure("no_text")
        if len(text) > MAX_TEXT:
            raise SlackApiFailure("msg_too_long")
        ts = self.next_ts()
        message = {k: v for k, v in params.items() if k != "token"}
        message.update(ts=ts, user=self.bot_user_id, bot_id=self.bot_id, text=text)
        self.posted.append(message)
        self._known.add((channel, ts))
        return {"channel": channel, "ts": ts, "message": {"type": "message", **message}}

    def _find_posted(self, params: JsonDict) -> JsonDict:
        wanted = (params.get("channel"), params.get("ts"))
        for message in self.posted:
            if (message["channel"], message["ts"]) == wanted and not message.get("deleted"):
                return message
        raise SlackApiFailure("message_not_found")

    def _update(self, params: JsonDict) -> JsonDict:
        message = self._find_posted(params)
        if len(params.get("text") or "") > MAX_TEXT:
            raise SlackApiFailure("msg_too_long")
        message.setdefault("history", []).append(message["text"])  # earlier texts, oldest first
        message.update({k: v for k, v in params.items() if k in ("text", "blocks", "attachments")})
        message["edited"] = {"user": self.bot_user_id, "ts": self.next_ts()}
        return {"channel": message["channel"], "ts": message["ts"], "text": message["text"]}

    def _delete(self, params: JsonDict) -> JsonDict:
        message = self._find_posted(params)
        message["deleted"] = True  # kept in `posted` (flagged), gone from messages_in()
        return {"channel": message["channel"], "ts": message["ts"]}

    def _react(self, params: JsonDict, add: bool) -> JsonDict:
        channel, ts, name = params.get("channel"), params.get("timestamp"), params.get("name")
        if not name:
            raise SlackApiFailure("invalid_name")
        if not channel or not ts:
            raise SlackApiFailure("no_item_specified")
        if (channel, ts) not in self._known:
            raise SlackApiFailure("message_not_found")
        key = (channel, ts, name)
        if add == (key in self._reacted):
            raise SlackApiFailure("already_reacted" if add else "no_reaction")
        if add:
            self._reacted.add(key)
        else:
            self._reacted.discard(key)
        self.reactions.append(("add" if add else "remove", channel, ts, name))
        return {}

    def _upload_url(self, params: JsonDict) -> JsonDict:
        name, length = params.get("filename"), int(params.get("length") or 0)
        if not name or length <= 0:
            raise SlackApiFailure("invalid_arguments")
        file_id = f"FUP{next(self._counter)}"
        self._uploading[file_id] = {"filename": name, "length": length, "data": None}
        return {"upload_url": f"{self.url}/upload/{file_id}", "file_id": file_id}

    async def _receive_upload(self, request: web.Request) -> web.Response:
        pending = self._uploading.get(request.match_info["file_id"])
        if pending is None:
            return web.Response(status=404)
        if request.content_type == "multipart/form-data":
            form = await request.post()
            field = next(v for v in form.values() if isinstance(v, web.FileField))
            pending["data"] = field.file.read()
        else:
            pending["data"] = await request.read()
        return web.Response(text=f"OK - {len(pending['data'])}")

    def _complete_upload(self, params: JsonDict) -> JsonDict:
        """Each uploaded file shared in ``channel_id`` (``thread_ts``), with the initial
        comment as its message's text, as one bot message each."""
        raw = params.get("files")
        files = json.loads(raw) if isinstance(raw, str) else raw
        channel = params.get("channel_id")
        if not files or not channel:
            raise SlackApiFailure("invalid_arguments")
        shared = []
        for item in files:
            pending = self._uploading.pop(str(item.get("id")), None)
            if pending is None or pending["data"] is None:
                raise SlackApiFailure("file_not_found")
            info = {"id": item["id"], "name": pending["filename"], "title": item.get("title")}
            ts = self.next_ts()
            message: JsonDict = {"channel": channel, "ts": ts, "user": self.bot_user_id}
            message.update(bot_id=self.bot_id, text=params.get("initial_comment") or "")
            message.update(files=[info])
            if params.get("thread_ts"):
                message["thread_ts"] = params["thread_ts"]
            self.posted.append(message)
            self._known.add((channel, ts))
            self.uploads.append(
                {"filename": pending["filename"], "data": pending["data"], "channel": channel}
                | {"thread_ts": params.get("thread_ts"), "ts": ts}
            )
            self._on_upload(message)
            shared.append(info)
        return {"files": shared}

    def _on_upload(self, message: JsonDict) -> None:
        """A subclass's hook: a file was shared (a chaos test kills the gateway here)."""

    def _history(self, params: JsonDict) -> JsonDict:
        """A channel's top-level messages (the bot's posts; thread replies are not in it),
        newest first, after ``oldest`` (exclusive). Metadata only with include_all_metadata,
        as Slack returns it."""
        channel = params.get("channel")
        if not channel:
            raise SlackApiFailure("channel_not_found")
        top = [m for m in self.messages_in(channel) if m.get("thread_ts") in (None, m["ts"])]
        return self._page(top[::-1], params)

    def _replies(self, params: JsonDict) -> JsonDict:
        """A thread's messages, oldest first (the bot's posts in it)."""
        channel, ts = params.get("channel"), params.get("ts")
        if not channel or not ts:
            raise SlackApiFailure("channel_not_found" if not channel else "thread_not_found")
        thread = [m for m in self.messages_in(channel) if ts in (m["ts"], m.get("thread_ts"))]
        return self._page(thread, params)

    def _page(self, messages: list[JsonDict], params: JsonDict) -> JsonDict:
        oldest = float(params.get("oldest") or 0)
        with_meta = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
        limit = int(params.get("limit") or 100)
        shown = []
        for m in messages:
            if float(m["ts"]) <= oldest:
                continue
            view = {"type": "message", **{k: v for k, v in m.items() if k != "channel"}}
            if not with_meta:
                view.pop("metadata", None)
            shown.append(view)
        return {"messages": shown[:limit], "has_more": len(shown) > limit}

    def _conversation_info(self, params: JsonDict) -> JsonDict:
        cid = params.get("channel") or ""
        if not cid:
            raise SlackApiFailure("channel_not_found")
        kind = channel_type_for(cid)
        channel: JsonDict = {"id": cid, "name": cid.lower(), "is_channel": kind == "channel"}
        channel.update(is_group=False, is_im=kind == "im", is_mpim=kind == "mpim")
        channel.update(is_private=kind != "channel", is_member=True)
        if kind == "im":
            channel.update(name=None, user="U123")
        return {"channel": {**channel, **self.channels.get(cid, {})}}

    def _user_info(self, params: JsonDict) -> JsonDict:
        uid = params.get("user") or ""
        if not uid:
            raise SlackApiFailure("user_not_found")
        name = "hermes" if uid == self.bot_user_id else f"user-{uid.lower()}"
        profile = {"display_name": name, "real_name": name.title()}
        user = {"id": uid, "team_id": self.team_id, "name": name, "real_name": name.title()}
        user.update(is_bot=uid == self.bot_user_id, deleted=False, tz="UTC", profile=profile)
        return {"user": {**user, **self.users.get(uid, {})}}

    def _file_info(self, params: JsonDict) -> JsonDict:
        if params.get("file") not in self.files:
            raise SlackApiFailure("file_not_found")
        return {"file": self.files[params["file"]]}

    async def _download(self, request: web.Request) -> web.StreamResponse:
        resp = await self._download_answer(request)
        auth = request.headers.get("Authorization")
        self.downloads.append({"path": request.path, "authorization": auth, "status": resp.status})
        return resp

    async def _download_answer(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"].rsplit("-", 1)[-1]
        auth = request.headers.get("Authorization")
        if auth != f"Bearer {self.bot_token}":
            if self.signin_page:
                return web.Response(text="<html>Sign in to Slack</html>", content_type="text/html")
            return web.Response(status=403 if auth else 401, text="not_authed")
        if self._download_faults:
            return web.Response(status=self._download_faults.popleft(), text="internal_error")
        if file_id not in self._file_bodies:
            return web.Response(status=404)
        mimetype, body = self.files[file_id]["mimetype"], self._file_bodies[file_id]
        if file_id not in self._chunked:
            return web.Response(body=body, content_type=mimetype)
        return await chunked_response(request, body, mimetype)


# -- helpers ------------------------------------------------------------------------------------


async def _read_params(request: web.Request) -> JsonDict:
    """Query, JSON and form parameters merged: the SDK uses all three depending on the method."""
    params: JsonDict = dict(request.query)
    if request.content_type == "application/json":
        params.update(await request.json())
    elif request.can_read_body:
        params.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
    for key in _JSON_FIELDS:
        if isinstance(params.get(key), str):
            try:
                params[key] = json.loads(params[key])
            except ValueError:
                pass  # kept as sent
    return params


def _fail(error: str, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"ok": False, "error": error}, status=status, headers=headers)


def _injected_failure(status: int, retry_after: float, error: str | None) -> web.Response:
    if status == 429:
        return _fail(error or "ratelimited", 429, {"Retry-After": str(int(retry_after))})
    return _fail(error or ("internal_error" if status >= 500 else "fatal_error"), status)


async def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.text()
