"""Wire-level fake of a signal-cli daemon started with ``--http`` (signal-cli-jsonrpc(5)), for
driving the Signal adapter offline: one account, the users writing to it, and what it sent.

Endpoints (as the man page has them):
- ``POST /api/v1/rpc``: one JSON-RPC 2.0 request (a batch is refused with -32600). Methods:
  ``version`` -> ``{version}``; ``listAccounts`` -> ``[{number, uuid}]`` (empty while the
  account is not registered); ``send`` (``recipient`` a number or a list of them, or
  ``groupId``; ``message``, ``quoteTimestamp``, ``quoteAuthor``, ``attachments`` as paths or
  ``data:`` URIs) -> ``{timestamp, results: [{recipientAddress: {number, uuid}, type}]}``
  with ``type`` ``SUCCESS`` or ``UNREGISTERED_FAILURE``; ``sendReaction`` (``emoji``,
  ``targetAuthor``, ``targetTimestamp``, ``remove``) and ``sendTyping`` (``stop``) likewise;
  ``sendReceipt``; ``listGroups`` -> ``[{id, name, isMember, members: [{number, uuid}]}]``;
  ``getAttachment`` (``id``) -> ``{data: base64}``.
- ``GET /api/v1/events``: Server-Sent Events, ``id: <boot>-<n>``, ``event: receive``,
  ``data: {"envelope": ..., "account": ...}``. The last 1000 events are kept; a client sending
  ``Last-Event-ID`` first gets the events after it, or all kept ones when the id is unknown
  (another boot); without the header, only new events.
- ``GET /api/v1/check``: 200 while the daemon runs.

Errors are JSON-RPC error objects (HTTP 200): -32700 not JSON, -32600 not a request, -32601
an unknown method, -32602 a missing or bad parameter, -1 a user error (unknown group or
attachment), -3 an I/O failure (``fail_next``), -5 rate limited.

Behaviour modelled from Signal itself: every message sent to a registered user (and every
member of a group) is acknowledged by a delivery receipt from that user's phone shortly after
(``online``; off: none comes); a user's message is an envelope with their number, uuid and
name; timestamps are milliseconds, strictly increasing. Limits: signal-cli sends a text over
2000 characters as a "long text" attachment; the fake takes it and records it as sent, and
tests check the parts' lengths. ``stop()`` then ``restart()`` is the daemon going down and
coming back: messages sent to the account meanwhile wait (as on Signal's servers) and arrive
as new events after the restart; the kept events of the old boot are gone.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import uuid as uuidlib
from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.fakes.server import FakeServer

JSON = dict[str, Any]
KEPT = 1000
RECEIPT_DELAY_S = 0.05


def user_uuid(number: str) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, number))


class RpcFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FakeSignalCli(FakeServer):
    def __init__(self, account: str = "+15550000001", **kw: Any) -> None:
        super().__init__(**kw)
        self.account = account
        self.uuid = user_uuid(account)
        self.registered = True
        self.online = True  # recipients' phones acknowledge what they get
        self.groups: dict[str, list[str]] = {}  # group id -> member numbers
        self.attachments: dict[str, bytes] = {}
        self.sent: list[JSON] = []  # every send, with its "timestamp"
        self.reactions: list[JSON] = []
        self.typing: list[JSON] = []
        self.calls: list[str] = []
        self.fail_next: dict[str, int] = {}  # method -> its next call's error code
        self.after_send: Callable[[JSON], None] | None = None  # e.g. a SIGKILL of the gateway
        # before a send goes out: True drops it (the daemon died first; answered with -3)
        self.before_send: Callable[[JSON], bool] | None = None
        self._lock = threading.Lock()
        self._queued: list[JSON] = []  # envelopes for the account while the daemon is down
        self._kept: deque[tuple[str, str]] = deque(maxlen=KEPT)
        self._clients: set[asyncio.Queue[tuple[str, str] | None]] = set()
        self._boot = 0
        self._seq = 0
        self._last_ts = 0
        self._route()

    def _route(self) -> None:
        self.app.router.add_post("/api/v1/rpc", self._rpc)
        self.app.router.add_get("/api/v1/events", self._events)
        self.app.router.add_get("/api/v1/check", self._check)

    # -- the daemon's life ----------------------------------------------------------------

    def start(self) -> FakeSignalCli:
        self._boot += 1
        self._kept.clear()
        super().start()
        with self._lock:
            queued, self._queued = self._queued, []
        for env in queued:
            self.call_soon(self._publish, env)
        return self

    def restart(self) -> FakeSignalCli:
        """The daemon back on the same port after `stop`: a new boot, nothing kept."""
        self._ready.clear()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)  # a stopped app is spent
        self.app.on_shutdown.append(self._on_shutdown)
        self._route()
        return self.start()

    async def on_shutdown(self) -> None:
        for queue in list(self._clients):
            queue.put_nowait(None)

    @property
    def events_url(self) -> str:
        return self.url

    # -- what users do ---------------------------------------------------------------------

    def stamp(self) -> int:
        with self._lock:
            self._last_ts = max(int(time.time() * 1000), self._last_ts + 1)
            return self._last_ts

    def send_text(
        self,
        source: str,
        text: str,
        *,
        group: str | None = None,
        mentions: list[JSON] | None = None,
        quote: JSON | None = None,
        attachments: list[JSON] | None = None,
        name: str = "",
    ) -> int:
        """A user's message to the account (or into ``group``); its timestamp."""
        ts = self.stamp()
        data: JSON = {"timestamp": ts, "message": text, "expiresInSeconds": 0, "viewOnce": False}
        data["mentions"] = mentions or []
        data["attachments"] = attachments or []
        if group is not None:
            data["groupInfo"] = {"groupId": group, "type": "DELIVER"}
        if quote is not None:
            data["quote"] = quote
        self.deliver(self.envelope(source, ts, name, dataMessage=data))
        return ts

    def mention_of_me(self, start: int = 0) -> JSON:
        return {
            "name": self.account,
            "number": self.account,
            "uuid": self.uuid,
            "start": start,
            "length": 1,
        }

    def add_attachment(self, att_id: str, data: bytes, content_type: str, filename: str) -> JSON:
        self.attachments[att_id] = data
        return {"id": att_id, "contentType": content_type, "filename": filename, "size": len(data)}

    def envelope(self, source: str, ts: int, name: str = "", **content: Any) -> JSON:
        return {
            "source": source,
            "sourceNumber": source,
            "sourceUuid": user_uuid(source),
            "sourceName": name or f"user {source[-4:]}",
            "sourceDevice": 1,
            "timestamp": ts,
            **content,
        }

    def deliver(self, envelope: JSON) -> None:
        """An envelope for the account: published now, or kept until the daemon is back."""
        if self.loop is None:
            with self._lock:
                self._queued.append(envelope)
            return
        self.call_soon(self._publish, envelope)

    def push_raw(self, data: str) -> None:
        """An event whose data is exactly ``data`` (a malformed payload)."""
        assert self.loop is not None
        self.call_soon(self._emit, data)

    def messages_to(self, chat: str) -> list[JSON]:
        key = "groupId" if not chat.startswith("+") else "recipient"
        return [m for m in list(self.sent) if chat in _as_list(m.get(key))]

    # -- the wire --------------------------------------------------------------------------

    def _publish(self, envelope: JSON) -> None:
        self._emit(json.dumps({"envelope": envelope, "account": self.account}))

    def _emit(self, data: str) -> None:
        self._seq += 1
        item = (f"{self._boot}-{self._seq}", data)
        self._kept.append(item)
        for queue in list(self._clients):
            queue.put_nowait(item)

    async def _check(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        last = request.headers.get("Last-Event-ID")
        ids = [i for i, _ in self._kept]
        if last is not None:
            start = ids.index(last) + 1 if last in ids else 0
            for item in list(self._kept)[start:]:
                queue.put_nowait(item)
        self._clients.add(queue)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:
            await resp.prepare(request)
            while (item := await queue.get()) is not None:
                await resp.write(f"id: {item[0]}\nevent: receive\ndata: {item[1]}\n\n".encode())
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._clients.discard(queue)
        return resp

    async def _rpc(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error(None, -32700, "Parse error")
        if not isinstance(body, dict) or not isinstance(body.get("method"), str):
            return _error(
                body.get("id") if isinstance(body, dict) else None,
                -32600,
                "method field must be set",
            )
        method, params = body["method"], body.get("params") or {}
        self.calls.append(method)
        try:
            if (code := self.fail_next.pop(method, None)) is not None:
                raise RpcFailure(code, f"{method} failed (injected)")
            result = await self._method(method, params)
        except RpcFailure as exc:
            return _error(body.get("id"), exc.code, exc.message)
        return web.json_response({"jsonrpc": "2.0", "result": result, "id": body.get("id")})

    async def _method(self, method: str, p: JSON) -> Any:
        if method == "version":
            return {"version": "0.13.99-fake"}
        if method == "listAccounts":
            return [{"number": self.account, "uuid": self.uuid}] if self.registered else []
        if method == "listGroups":
            return [
                {
                    "id": gid,
                    "name": f"group {gid[:4]}",
                    "isMember": True,
                    "isBlocked": False,
                    "members": [{"number": n, "uuid": user_uuid(n)} for n in members],
                }
                for gid, members in self.groups.items()
            ]
        if method == "getAttachment":
            data = self.attachments.get(_need(p, "id"))
            if data is None:
                raise RpcFailure(-1, "Attachment file not found")
            return {"data": base64.b64encode(data).decode()}
        if method == "sendTyping":
            self.typing.append({**p, **self._where(p)})
            return {}
        if method == "sendReceipt":
            return {}
        if method == "sendReaction":
            for key in ("emoji", "targetAuthor", "targetTimestamp"):
                _need(p, key)
            return self._sent(p, self.reactions)
        if method == "send":
            if not p.get("message") and not p.get("attachments"):
                raise RpcFailure(-32602, "No message given")
            if self.before_send is not None and self.before_send(p):
                raise RpcFailure(-3, "Failed to send message: connection closed")
            return self._sent(p, self.sent)
        raise RpcFailure(-32601, f"Method not implemented: {method}")

    def _where(self, p: JSON) -> JSON:
        if p.get("groupId"):
            if p["groupId"] not in self.groups:
                raise RpcFailure(-1, "Invalid group id: group not found")
            return {"groupId": p["groupId"]}
        recipients = _as_list(p.get("recipient"))
        if not recipients:
            raise RpcFailure(-32602, "No recipients given")
        return {"recipient": recipients}

    def _sent(self, p: JSON, into: list[JSON]) -> JSON:
        where = self._where(p)
        ts = self.stamp()
        people = self.groups[where["groupId"]] if "groupId" in where else where["recipient"]
        record = {**p, **where, "timestamp": ts}
        into.append(record)
        if self.online:
            for person in people:
                receipt = {"when": ts + 1, "isDelivery": True, "isRead": False, "timestamps": [ts]}
                env = self.envelope(person, self.stamp(), receiptMessage=receipt)
                asyncio.get_running_loop().call_later(RECEIPT_DELAY_S, self._publish, env)
        if into is self.sent and self.after_send is not None:
            self.after_send(record)
        results = [
            {"recipientAddress": {"number": n, "uuid": user_uuid(n)}, "type": "SUCCESS"}
            for n in people
        ]
        return {"timestamp": ts, "results": results}


def _need(p: JSON, key: str) -> Any:
    if p.get(key) in (None, ""):
        raise RpcFailure(-32602, f"Missing parameter: {key}")
    return p[key]


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


def _error(rid: Any, code: int, message: str) -> web.Response:
    body = {"jsonrpc": "2.0", "error": {"code": code, "message": message, "data": None}, "id": rid}
    return web.json_response(body)
