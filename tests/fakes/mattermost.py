"""A fake Mattermost server (REST v4 and the WebSocket) for driving the real adapter offline,
built from Mattermost's public API reference (api.mattermost.com) and its WebSocket docs.

WebSocket, ``GET /api/v4/websocket``: the client sends ``{"seq": 1, "action":
"authentication_challenge", "data": {"token": ...}}``; the server answers ``{"status": "OK",
"seq_reply": 1}`` then the ``hello`` event (a refused token: ``"status": "FAIL"`` with an
``error`` and the socket closed). Events are ``{"event", "data", "broadcast", "seq"}``, ``seq``
counting from 0 per connection; ``posted`` carries the post as a JSON *string* in
``data.post``, with ``channel_type``, ``sender_name`` and ``mentions`` (a JSON string of user
ids). Every member's socket gets the event, the author's own included. Test levers: close
every socket (`drop_sockets`), refuse new ones meanwhile (`refuse_sockets`), swallow an event
(a ``seq`` gap: `skip_next_events`).

REST, under ``/api/v4``, with ``Authorization: Bearer <token>``:
- ``GET /users/me``; ``POST /users/{id}/typing`` ``{channel_id, parent_id}``;
- ``POST /posts`` ``{channel_id, message, root_id, file_ids, props, pending_post_id}``: 201
  and the post; a repeat of a ``pending_post_id`` within `dedupe_window_s` (the real server
  keeps them 30 s) answers the first post again; a message over `max_post_chars` (16383,
  Mattermost's default MaxPostSize) is a 400; ``props`` are kept and returned;
- ``POST /files`` (multipart: ``channel_id``, ``files``): 201 ``{file_infos: [...]}``; a post
  carrying its id in ``file_ids`` shows it (`uploads` records each);
- ``PUT /posts/{id}/patch`` ``{message}`` (only the author's post: else 403);
- ``GET /files/{id}`` (the bytes) and ``GET /files/{id}/info``;
- ``GET /channels/{id}/posts?since=<ms>``: the posts created or changed after ``since``,
  as a PostList ``{order (newest first), posts, next_post_id, prev_post_id}``;
- ``GET /channels/{id}``; ``POST /channels/direct`` ``[user_id, user_id]``;
- ``GET /users/me/teams``; ``GET /users/me/teams/{team_id}/channels``: the bot's channels of
  the team and its direct and group channels, each with its ``last_post_at``.
Errors are Mattermost's body ``{id, message, detailed_error, request_id, status_code}``: 401
for a missing or wrong token, 403, 404, 400, and 429 past the rate limit. Every answer carries
``X-Ratelimit-Limit``, ``X-Ratelimit-Remaining`` and ``X-Ratelimit-Reset`` (seconds until the
window resets), per token and per second as the server's rate limiter counts; a 429 also
carries ``Retry-After``. `rate_limit` is generous by default.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import string
import time
from collections.abc import Callable
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.server import FakeServer

JsonDict = dict[str, Any]
TOKEN = "mmbottoken0000000000000000"
BOT_ID = "botuser0000000000000000000"
BOT_NAME = "hermes"
ALICE = "alice00000000000000000000a"
STRANGER = "mallory0000000000000000000"
TOWN = "town00000000000000000000ch"  # a public channel the bot and alice are in
TEAM = "team0000000000000000000000"


def new_id() -> str:
    """A Mattermost id: 26 lowercase letters and digits."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(26))


def dm_name(a: str, b: str) -> str:
    return "__".join(sorted((a, b)))


class Failure(Exception):
    def __init__(self, status: int, error_id: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_id, self.message = status, error_id, message


class FakeMattermost(FakeServer):
    def __init__(self, port: int = 0, *, token: str = TOKEN) -> None:
        super().__init__(port)
        self.token = token
        self.users: dict[str, JsonDict] = {}
        self.channels: dict[str, JsonDict] = {}
        self.members: dict[str, set[str]] = {}
        self.posts: dict[str, JsonDict] = {}
        self.files: dict[str, tuple[JsonDict, bytes]] = {}
        self.calls: list[tuple[str, str, Any]] = []  # (method, path with query, body)
        self.typing: list[JsonDict] = []
        self.downloads: list[str] = []  # file ids whose bytes were fetched
        self.uploads: list[JsonDict] = []  # files the bot uploaded: channel_id, name, data
        self.dedupe_window_s = 30.0
        self.dedupe_hits = 0
        self.max_post_chars = 16383
        self.rate_limit = 1000  # requests per second per token
        self.rate_limited = 0  # requests answered 429
        self.refuse_sockets = False
        self.refused = 0  # socket attempts refused
        self.skip_next_events = 0
        # called on the fake's loop after each post the bot made, before it hears back
        self.after_bot_post: Callable[[JsonDict], None] | None = None
        self.sockets: list[web.WebSocketResponse] = []
        self.socket_count = 0  # sockets authenticated so far
        self._seq: dict[int, int] = {}  # id(socket) -> the next seq
        self._pending: dict[str, tuple[str, float]] = {}  # pending_post_id -> post id, when
        self._window: tuple[int, int] = (0, 0)  # (second, requests in it)
        self._last_at = 0
        self._add_user(BOT_ID, BOT_NAME, is_bot=True)
        self._add_user(ALICE, "alice")
        self._add_user(STRANGER, "mallory")
        self.dm_alice = self._add_channel(new_id(), "D", dm_name(BOT_ID, ALICE), {BOT_ID, ALICE})
        self.dm_stranger = self._add_channel(
            new_id(), "D", dm_name(BOT_ID, STRANGER), {BOT_ID, STRANGER}
        )
        self._add_channel(TOWN, "O", "town", {BOT_ID, ALICE, STRANGER})
        r = self.app.router
        r.add_get("/api/v4/websocket", self._socket)
        r.add_get("/api/v4/users/me", self._rest(self._me))
        r.add_get("/api/v4/users/me/teams", self._rest(self._teams))
        r.add_get("/api/v4/users/me/teams/{team_id}/channels", self._rest(self._my_channels))
        r.add_post("/api/v4/users/{user_id}/typing", self._rest(self._typing))
        r.add_post("/api/v4/posts", self._rest(self._create_post))
        r.add_post("/api/v4/files", self._upload)
        r.add_put("/api/v4/posts/{post_id}/patch", self._rest(self._patch_post))
        r.add_get("/api/v4/files/{file_id}/info", self._rest(self._file_info))
        r.add_get("/api/v4/files/{file_id}", self._rest(self._file))
        r.add_get("/api/v4/channels/{channel_id}/posts", self._rest(self._channel_posts))
        r.add_get("/api/v4/channels/{channel_id}", self._rest(self._channel))
        r.add_post("/api/v4/channels/direct", self._rest(self._direct))

    def start(self) -> FakeMattermost:
        super().start()
        return self

    def __enter__(self) -> FakeMattermost:
        return self.start()

    # -- what tests call (from their own thread) ---------------------------------------------

    def post_as(
        self,
        user: str,
        channel: str,
        message: str,
        root_id: str = "",
        file_ids: tuple[str, ...] = (),
    ) -> JsonDict:
        """A user's post: stored, and broadcast to the channel's members' sockets."""
        return self.call(lambda: self._post(user, channel, message, root_id, list(file_ids)))

    def bot_posts(self, channel: str) -> list[JsonDict]:
        """The bot's posts in ``channel``, oldest first (their current text)."""
        found = [p for p in self.posts.values() if p["channel_id"] == channel]
        return [p for p in sorted(found, key=lambda p: p["create_at"]) if p["user_id"] == BOT_ID]

    def add_file(self, name: str, data: bytes, mime: str, user: str = ALICE) -> str:
        file_id = new_id()
        info = {
            "id": file_id,
            "user_id": user,
            "name": name,
            "extension": name.rpartition(".")[2],
            "size": len(data),
            "mime_type": mime,
            "create_at": int(time.time() * 1000),
        }
        self.files[file_id] = (info, data)
        return file_id

    def requests_to(self, method: str, prefix: str) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if c[0] == method and c[1].startswith(prefix)]

    def drop_sockets(self) -> None:
        """Close every socket (the server restarting, a proxy timing out)."""

        async def go() -> None:
            for ws in list(self.sockets):
                await ws.close()

        self.call(go)

    def send_raw(self, data: str) -> None:
        """A frame as it is, to every socket (an odd or malformed event)."""

        async def go() -> None:
            for ws in list(self.sockets):
                await ws.send_str(data)

        self.call(go)

    @property
    def live_sockets(self) -> int:
        return len([ws for ws in self.sockets if not ws.closed])

    async def on_shutdown(self) -> None:
        for ws in list(self.sockets):
            await ws.close()

    # -- the model ---------------------------------------------------------------------------

    def _add_user(self, user_id: str, username: str, is_bot: bool = False) -> None:
        self.users[user_id] = {"id": user_id, "username": username, "is_bot": is_bot}

    def _add_channel(self, channel_id: str, kind: str, name: str, members: set[str]) -> str:
        self.channels[channel_id] = {
            "id": channel_id,
            "type": kind,
            "name": name,
            "display_name": name,
            "team_id": "" if kind in ("D", "G") else TEAM,
            "last_post_at": 0,
        }
        self.members[channel_id] = set(members)
        return channel_id

    def _now_ms(self) -> int:
        self._last_at = max(int(time.time() * 1000), self._last_at + 1)
        return self._last_at

    async def _post(
        self,
        user: str,
        channel: str,
        message: str,
        root_id: str,
        file_ids: list[str],
        props: JsonDict | None = None,
        pending: str = "",
    ) -> JsonDict:
        at = self._now_ms()
        post: JsonDict = {
            "id": new_id(),
            "create_at": at,
            "update_at": at,
            "edit_at": 0,
            "delete_at": 0,
            "user_id": user,
            "channel_id": channel,
            "root_id": root_id,
            "message": message,
            "type": "",
            "props": props or {},
            "file_ids": file_ids,
            "pending_post_id": pending,
            "metadata": {"files": [self.files[f][0] for f in file_ids if f in self.files]},
        }
        self.posts[post["id"]] = post
        self.channels[channel]["last_post_at"] = at
        await self._broadcast(post)
        return post

    async def _broadcast(self, post: JsonDict) -> None:
        channel = self.channels[post["channel_id"]]
        mentions = [u for u, v in self.users.items() if f"@{v['username']}" in post["message"]]
        event = {
            "event": "posted",
            "data": {
                "channel_display_name": channel["display_name"],
                "channel_name": channel["name"],
                "channel_type": channel["type"],
                "post": json.dumps(post),
                "sender_name": "@" + self.users[post["user_id"]]["username"],
                "team_id": channel["team_id"],
                "mentions": json.dumps(mentions),
            },
            "broadcast": {"omit_users": None, "user_id": "", "channel_id": channel["id"]},
        }
        if self.skip_next_events > 0:  # lost on the way: the sockets' seq still moves on
            self.skip_next_events -= 1
            for key in self._seq:
                self._seq[key] += 1
            return
        if BOT_ID in self.members[channel["id"]]:
            for ws in list(self.sockets):
                await self._send_event(ws, event)

    async def _send_event(self, ws: web.WebSocketResponse, event: JsonDict) -> None:
        seq = self._seq.get(id(ws), 0)
        self._seq[id(ws)] = seq + 1
        try:
            await ws.send_str(json.dumps({**event, "seq": seq}))
        except ConnectionError:
            pass

    # -- the WebSocket -----------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_sockets:
            self.refused += 1
            return _error(503, "api.web_socket.unavailable", "The server is restarting.")
        ws = web.WebSocketResponse(heartbeat=None)
        await ws.prepare(request)
        authed = False
        try:
            async for message in ws:
                if message.type != WSMsgType.TEXT:
                    continue
                try:
                    frame = json.loads(message.data)
                except ValueError:
                    continue
                if authed or frame.get("action") != "authentication_challenge":
                    continue
                reply_to = frame.get("seq")
                if (frame.get("data") or {}).get("token") != self.token:
                    error = {"id": "api.web_socket_router.not_authenticated.app_error"}
                    error["message"] = "Invalid or expired session, please login again."
                    await ws.send_str(
                        json.dumps({"status": "FAIL", "seq_reply": reply_to, "error": error})
                    )
                    await ws.close()
                    break
                authed = True
                await ws.send_str(json.dumps({"status": "OK", "seq_reply": reply_to}))
                self._seq[id(ws)] = 0
                self.sockets.append(ws)
                self.socket_count += 1
                hello = {"server_version": "10.5.0.fake", "connection_id": new_id()}
                await self._send_event(ws, {"event": "hello", "data": hello, "broadcast": {}})
        finally:
            if ws in self.sockets:
                self.sockets.remove(ws)
            self._seq.pop(id(ws), None)
        return ws

    # -- REST --------------------------------------------------------------------------------

    def _rest(self, handler: Callable[[web.Request, Any], Any]) -> Any:
        async def serve(request: web.Request) -> web.StreamResponse:
            body: Any = None
            if request.can_read_body:
                try:
                    body = await request.json()
                except ValueError:
                    return _error(400, "api.context.invalid_body_param.app_error", "Bad JSON.")
            self.calls.append((request.method, request.path_qs, body))
            limited = self._count()
            response: web.StreamResponse
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                response = _error(
                    401,
                    "api.context.session_expired.app_error",
                    "Invalid or expired session, please login again.",
                )
            elif limited is not None:
                response = limited
            else:
                try:
                    result = handler(request, body)
                    if asyncio.iscoroutine(result):
                        result = await result
                except Failure as exc:
                    response = _error(exc.status, exc.error_id, exc.message)
                else:
                    response = self._answer(request, result)
            self._rate_headers(response)
            return response

        return serve

    @staticmethod
    def _answer(request: web.Request, result: Any) -> web.StreamResponse:
        if isinstance(result, web.StreamResponse):
            return result
        status = 201 if request.method == "POST" and result is not None else 200
        return web.json_response(result, status=status)

    async def _upload(self, request: web.Request) -> web.Response:
        self.calls.append((request.method, request.path_qs, None))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _error(401, "api.context.session_expired.app_error", "Invalid session.")
        form = await request.post()
        channel, part = form.get("channel_id"), form.get("files")
        if channel not in self.channels or not isinstance(part, web.FileField):
            return _error(400, "api.file.upload_file.bad_parse.app_error", "Bad upload.")
        data = part.file.read()
        file_id = self.add_file(part.filename, data, part.content_type, user=BOT_ID)
        self.uploads.append({"channel_id": channel, "name": part.filename, "data": data})
        return web.json_response({"file_infos": [self.files[file_id][0]]}, status=201)

    def _count(self) -> web.Response | None:
        second = int(time.time())
        start, used = self._window
        used = used + 1 if start == second else 1
        self._window = (second, used)
        if used <= self.rate_limit:
            return None
        self.rate_limited += 1
        response = _error(429, "api.context.rate_limit_exceeded.app_error", "limit exceeded")
        response.headers["Retry-After"] = "1"
        return response

    def _rate_headers(self, response: web.StreamResponse) -> None:
        _, used = self._window
        response.headers["X-Ratelimit-Limit"] = str(self.rate_limit)
        response.headers["X-Ratelimit-Remaining"] = str(max(0, self.rate_limit - used))
        response.headers["X-Ratelimit-Reset"] = "1"

    def _me(self, request: web.Request, body: Any) -> JsonDict:
        return dict(self.users[BOT_ID])

    def _teams(self, request: web.Request, body: Any) -> list[JsonDict]:
        return [{"id": TEAM, "name": "crew", "display_name": "Crew"}]

    def _my_channels(self, request: web.Request, body: Any) -> list[JsonDict]:
        team = request.match_info["team_id"]
        if team != TEAM:
            raise Failure(403, "api.context.permissions.app_error", "You do not have permission.")
        return [
            c
            for c in self.channels.values()
            if BOT_ID in self.members[c["id"]] and c["team_id"] in (team, "")
        ]

    def _typing(self, request: web.Request, body: Any) -> JsonDict:
        if request.match_info["user_id"] != BOT_ID:
            raise Failure(403, "api.context.permissions.app_error", "You do not have permission.")
        self.typing.append(dict(body or {}))
        return {"status": "OK"}

    async def _create_post(self, request: web.Request, body: Any) -> JsonDict:
        if not isinstance(body, dict) or body.get("channel_id") not in self.channels:
            raise Failure(400, "api.context.invalid_body_param.app_error", "Invalid channel_id.")
        message = str(body.get("message") or "")
        if len(message) > self.max_post_chars:
            raise Failure(400, "model.post.is_valid.message_length.app_error", "Message too long.")
        root = str(body.get("root_id") or "")
        if root and root not in self.posts:
            raise Failure(400, "api.post.create_post.root_id.app_error", "Invalid RootId.")
        pending = str(body.get("pending_post_id") or "")
        seen = self._pending.get(pending) if pending else None
        if seen is not None and time.monotonic() - seen[1] < self.dedupe_window_s:
            self.dedupe_hits += 1
            return self.posts[seen[0]]
        props = body.get("props") if isinstance(body.get("props"), dict) else {}
        files = [f for f in body.get("file_ids") or [] if isinstance(f, str)]
        post = await self._post(BOT_ID, body["channel_id"], message, root, files, props, pending)
        if pending:
            self._pending[pending] = (post["id"], time.monotonic())
        if self.after_bot_post is not None:
            self.after_bot_post(post)
        return post

    def _patch_post(self, request: web.Request, body: Any) -> JsonDict:
        post = self.posts.get(request.match_info["post_id"])
        if post is None or post["delete_at"]:
            raise Failure(404, "app.post.get.app_error", "Unable to get the post.")
        if post["user_id"] != BOT_ID:
            raise Failure(403, "api.context.permissions.app_error", "You do not have permission.")
        if isinstance(body, dict) and "message" in body:
            message = str(body["message"])
            if len(message) > self.max_post_chars:
                raise Failure(400, "model.post.is_valid.message_length.app_error", "Too long.")
            post["message"] = message
            post["edit_at"] = post["update_at"] = self._now_ms()
        return post

    def _file_info(self, request: web.Request, body: Any) -> JsonDict:
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            raise Failure(404, "app.file_info.get.app_error", "Unable to get the file info.")
        return found[0]

    def _file(self, request: web.Request, body: Any) -> web.Response:
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            raise Failure(404, "app.file_info.get.app_error", "Unable to get the file.")
        info, data = found
        self.downloads.append(info["id"])
        return web.Response(body=data, content_type=info["mime_type"])

    def _channel_posts(self, request: web.Request, body: Any) -> JsonDict:
        channel = request.match_info["channel_id"]
        if channel not in self.channels:
            raise Failure(404, "app.channel.get.existing.app_error", "Unable to find the channel.")
        since = int(request.query.get("since") or 0)
        found = [
            p for p in self.posts.values() if p["channel_id"] == channel and p["update_at"] > since
        ]
        found.sort(key=lambda p: p["create_at"], reverse=True)
        return {
            "order": [p["id"] for p in found],
            "posts": {p["id"]: p for p in found},
            "next_post_id": "",
            "prev_post_id": "",
        }

    def _channel(self, request: web.Request, body: Any) -> JsonDict:
        found = self.channels.get(request.match_info["channel_id"])
        if found is None:
            raise Failure(404, "app.channel.get.existing.app_error", "Unable to find the channel.")
        return found

    def _direct(self, request: web.Request, body: Any) -> JsonDict:
        if not isinstance(body, list) or len(body) != 2 or not all(u in self.users for u in body):
            raise Failure(400, "api.context.invalid_body_param.app_error", "Invalid user ids.")
        name = dm_name(*body)
        for channel in self.channels.values():
            if channel["name"] == name:
                return channel
        return self.channels[self._add_channel(new_id(), "D", name, set(body))]


def _error(status: int, error_id: str, message: str) -> web.Response:
    body = {
        "id": error_id,
        "message": message,
        "detailed_error": "",
        "request_id": new_id(),
        "status_code": status,
    }
    return web.json_response(body, status=status)
