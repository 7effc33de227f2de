"""A fake Discord (gateway WebSocket + REST v10) on 127.0.0.1 that the real discord.py connects to.

Point discord.py at it with `fake.patch(monkeypatch)` (or `with fake.patched():`), inject
events (`send_message`, `send_interaction`, `reconnect`, ...), observe the bot (`sent`, `ops`, ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import hmac
import json
import math
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, unquote

import pytest
from aiohttp import WSMsgType, web

from tests.fakes.discord_payloads import (
    APP_FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED,
    EPHEMERAL_FLAG,
    EVERYONE_PERMISSIONS,
    LOADING_FLAG,
    MESSAGE_CONTENT_INTENT,
    content_too_long_error,
    iso_now,
    make_app_command,
    make_application,
    make_attachment,
    make_channel,
    make_command_options,
    make_dm_channel,
    make_error,
    make_guild,
    make_interaction,
    make_interaction_callback,
    make_member,
    make_message,
    make_ready,
    make_role,
    make_thread,
    make_user,
    snowflake,
)
from tests.fakes.server import FakeServer, chunked_response

API_PREFIX = "/api/v10"
CONTENT_LIMIT = 2000
_THREAD_TYPES = (10, 11, 12)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py compares Content-Type with exactly "application/json"; aiohttp's json_response
    # adds "; charset=utf-8", which makes discord.py treat the body as text and crash.
    headers = {"Content-Type": "application/json", **(headers or {})}
    return web.Response(body=json.dumps(data).encode(), status=status, headers=headers)


def _snow(raw: str, code: int = 10003, what: str = "Unknown Channel") -> int:
    try:
        return int(raw)
    except ValueError:
        raise ApiError(404, code, what) from None


class ApiError(Exception):
    """Raised by a REST handler to answer with Discord's JSON error body."""

    def __init__(self, status: int, code: int, message: str, body: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or make_error(code, message)


@dataclass(eq=False)
class _Conn:
    ws: web.WebSocketResponse
    transport: asyncio.BaseTransport | None
    session: _Session | None = None


@dataclass(eq=False)
class _Session:
    session_id: str
    intents: int
    shard: tuple[int, int] = (0, 1)  # [shard id, shard count] from IDENTIFY
    seq: int = 0
    frames: list[dict] = field(default_factory=list)  # every dispatch, replayed on RESUME
    conn: _Conn | None = None  # None while disconnected: dispatches only queue in `frames`


@dataclass
class _Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    retry_after: float
    times: int
    body: dict | None


@dataclass
class _Interaction:
    id: int
    token: str
    command: str
    channel_id: int
    user: dict
    responded: bool = False
    original: dict | None = None
    created: float = field(default_factory=time.time)


class FakeDiscord(FakeServer):
    """One bot, one guild with one text channel; DMs and threads are created on demand.

    Like Discord: events dispatched before the client IDENTIFYs are lost (see `undelivered`;
    wait for `connected`), the bot's own messages come back as MESSAGE_CREATE, and guild
    messages lose their content for a session without the MESSAGE_CONTENT intent. `sent`
    holds channel POSTs only; interaction replies go to `interaction_responses`.
    """

    def __init__(
        self,
        token: str = "dc-token",
        bot_id: int = 1000,
        bot_name: str = "hermes",
        guild_id: int = 2000,
        channel_id: int = 3000,
        *,
        application_id: int | None = None,
        owner_id: int = 1,
        heartbeat_interval: float = 1.0,
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.token, self.bot_id, self.bot_name = token, bot_id, bot_name
        self.guild_id, self.channel_id = guild_id, channel_id
        self.application_id = application_id or bot_id
        self.heartbeat_interval = heartbeat_interval
        # The developer-portal toggle: when off, IDENTIFY asking for MESSAGE_CONTENT gets 4014.
        self.message_content_intent = True
        # Discord echoes the bot's own messages/edits/deletes back over the gateway.
        self.echo_bot_messages = True
        # Interaction tokens die this long after the interaction: webhooks then answer 401.
        self.interaction_lifetime_s = 15 * 60.0
        # enforce_nonce: a message by the same author with the same nonce this recently is
        # returned instead of a new one ("the past few minutes", Discord says)
        self.nonce_window_s = 180.0
        self._nonces: dict[str, tuple[float, dict]] = {}
        self._init_observations()
        self.bot_user = make_user(bot_id, bot_name, bot=True)
        self._owner = make_user(owner_id, "owner")
        self._users: dict[int, dict] = {bot_id: self.bot_user, owner_id: self._owner}
        self._channels: dict[int, dict] = {channel_id: make_channel(channel_id, guild_id)}
        self._guilds: list[int] = [guild_id]  # more come from add_guild()
        # what GET /gateway/bot recommends; each guild's events go to shard
        # (guild_id >> 22) % count of the sessions' count, DMs to shard 0
        self.shard_count = 1
        self._dms: dict[int, int] = {}  # user id -> DM channel id
        self._history: dict[int, list[dict]] = {}
        self._messages: dict[int, dict] = {}
        self._files: dict[int, tuple[bytes, str, bool]] = {}  # id -> data, type, chunked
        self._file_faults: list[int] = []  # statuses for the next attachment downloads
        # CDN links are signed (``ex``/``is``/``hm``) and die after `link_lifetime_s`; a CDN
        # clock ahead by `cdn_clock_skew` s refuses links whose ``ex`` still looks valid
        self._cdn_key = secrets.token_bytes(16)
        self.link_lifetime_s = 86400
        self.cdn_clock_skew = 0.0
        self._sessions: dict[str, _Session] = {}
        self._session: _Session | None = None  # the last one identified or resumed
        self._shards: dict[int, _Session] = {}  # shard id -> its latest session
        self._conns: list[_Conn] = []
        self._interactions: dict[str, _Interaction] = {}
        self._global_commands: list[dict] = []
        self._guild_commands: dict[int, list[dict]] = {}
        self._command_ids: dict[tuple[str, int | None], int] = {}
        self._faults: list[_Fault] = []
        self._faults_lock = threading.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self.app.middlewares.append(self._rest_middleware)
        self._add_routes()

    def _init_observations(self) -> None:
        self.sent: list[dict] = []  # messages the bot POSTed to channels (dicts, edits applied)
        self.edits: list[dict] = []  # every PATCH of a channel message, in order
        self.nonce_hits: list[dict] = []  # posts answered with an earlier message (enforce_nonce)
        self.deleted: list[dict] = []
        self.typing: list[int] = []
        self.reactions: list[dict] = []
        self.uploads: list[dict] = []  # files the bot uploaded: filename, content_type, data
        self.ops: list[int] = []
        self.identifies = 0
        self.resumes = 0
        self.intents: int | None = None  # from the last IDENTIFY
        self.identified: list[tuple[int, int]] = []  # the shard of each accepted IDENTIFY
        self.identify_times: list[float] = []  # time.monotonic() of each accepted IDENTIFY
        self.interaction_responses: list[dict] = []
        self.requests: list[tuple[str, str]] = []  # (method, path after /api/v10)
        self.file_requests: list[dict] = []  # attachment downloads: path, headers
        self.refreshed: list[str] = []  # URLs sent to POST /attachments/refresh-urls
        self.errors: list[BaseException] = []  # bugs inside the fake; tests assert it stays empty
        self.undelivered: list[tuple[str, dict]] = []  # dispatched while no session existed
        self.connected = threading.Event()

    # -- wiring -------------------------------------------------------------------------------

    def start(self) -> FakeDiscord:
        super().start()
        return self

    @property
    def api_base(self) -> str:
        return f"{self.url}{API_PREFIX}"

    @property
    def cdn_base(self) -> str:
        """Where this fake serves attachments (Discord: https://cdn.discordapp.com)."""
        return self.url

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Point discord.py's process-global REST base and gateway URL here for one test."""
        # Imported late: this module's own name shadows `discord` if tests/fakes is on sys.path.
        import discord.gateway
        import discord.http
        import yarl

        monkeypatch.setattr(discord.http.Route, "BASE", self.api_base)
        gateway = yarl.URL(self.gateway_url)
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", gateway)

    @contextlib.contextmanager
    def patched(self) -> Iterator[FakeDiscord]:
        """Like `patch`, without pytest: restores both globals on exit."""
        import discord.gateway
        import discord.http
        import yarl

        route, ws = discord.http.Route, discord.gateway.DiscordWebSocket
        saved = route.BASE, ws.DEFAULT_GATEWAY
        route.BASE, ws.DEFAULT_GATEWAY = self.api_base, yarl.URL(self.gateway_url)
        try:
            yield self
        finally:
            route.BASE, ws.DEFAULT_GATEWAY = saved

    def _add_routes(self) -> None:
        self.app.router.add_get("/gateway", self._gateway)
        self.app.router.add_get("/attachments/{cid}/{aid}/{filename}", self._attachment)
        msg = "/channels/{cid}/messages/{mid}"
        routes: list[tuple[str, str, _Handler]] = [
            ("GET", "/users/@me", self._get_me),
            ("GET", "/oauth2/applications/@me", self._get_application),
            ("GET", "/gateway", self._get_gateway),
            ("GET", "/gateway/bot", self._get_gateway),
            ("POST", "/users/@me/channels", self._create_dm),
            ("POST", "/attachments/refresh-urls", self._refresh_urls),
            ("GET", "/channels/{cid}", self._get_channel),
            ("GET", "/channels/{cid}/messages", self._get_history),
            ("POST", "/channels/{cid}/messages", self._create_message),
            ("GET", msg, self._get_message),
            ("PATCH", msg, self._edit_message),
            ("DELETE", msg, self._delete_message),
            ("POST", "/channels/{cid}/typing", self._trigger_typing),
            ("PUT", msg + "/reactions/{emoji}/@me", self._react),
            ("DELETE", msg + "/reactions/{emoji}/@me", self._react),
            ("POST", "/interactions/{iid}/{itoken}/callback", self._interaction_callback),
            ("POST", "/webhooks/{app}/{itoken}", self._followup),
        ]
        for method in ("GET", "PUT"):
            routes.append((method, "/applications/{app}/commands", self._commands))
            routes.append((method, "/applications/{app}/guilds/{gid}/commands", self._commands))
        for method in ("GET", "PATCH", "DELETE"):
            routes.append((method, "/webhooks/{app}/{itoken}/messages/{mid}", self._webhook_msg))
        for method, path, handler in routes:
            self.app.router.add_route(method, API_PREFIX + path, handler)

    async def on_shutdown(self) -> None:
        # Abort instead of a close handshake: the client may be gone or its loop blocked.
        for conn in list(self._conns):
            if conn.transport is not None:
                conn.transport.abort()

    # -- REST plumbing ------------------------------------------------------------------------

    @web.middleware
    async def _rest_middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        if not request.path.startswith(API_PREFIX + "/"):
            return await handler(request)
        path = request.path[len(API_PREFIX) :]
        self.requests.append((request.method, path))
        # Interaction callbacks and webhooks carry their token in the URL, not a header.
        url_auth = path.startswith(("/interactions/", "/webhooks/"))
        if not url_auth and request.headers.get("Authorization") != f"Bot {self.token}":
            return _json(make_error(0, "401: Unauthorized"), 401)
        fault = self._take_fault(request.method, path)
        if fault is not None:
            return fault
        try:
            return await handler(request)
        except ApiError as exc:
            return _json(exc.body, exc.status)
        except web.HTTPException as exc:
            return _json(make_error(0, f"{exc.status}: {exc.reason}"), exc.status)
        except Exception as exc:
            # A bug in the fake. 400, not 500: discord.py retries 5xx with multi-second sleeps.
            self.errors.append(exc)
            return _json(make_error(0, f"fake-discord error: {exc!r}"), 400)

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int = 429,
        retry_after: float = 0.1,
        times: int = 1,
        body: dict | None = None,
    ) -> None:
        """Answer the next `times` requests whose path (after /api/v10) matches `path_regex`
        (re.search; method "*" matches any) with `status`. Note discord.py retries 500, 502,
        504 and 524 itself after sleeping 1 s, 3 s, ...; 503 raises DiscordServerError at once."""
        fault = _Fault(method.upper(), re.compile(path_regex), status, retry_after, times, body)
        with self._faults_lock:
            self._faults.append(fault)

    def clear_faults(self) -> None:
        """Forget the faults `fail_next` armed and no request has taken yet."""
        with self._faults_lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str) -> web.Response | None:
        with self._faults_lock:
            for fault in self._faults:
                if fault.method in (method, "*") and fault.pattern.search(path):
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                    return self._fault_response(fault, method)
        return None

    def _fault_response(self, fault: _Fault, method: str) -> web.Response:
        if fault.status != 429:
            reason = HTTPStatus(fault.status).phrase
            return _json(fault.body or make_error(0, f"{fault.status}: {reason}"), fault.status)
        wait = fault.retry_after
        body = {"message": "You are being rate limited.", "retry_after": wait, "global": False}
        bucket = hashlib.sha1(f"{method} {fault.pattern.pattern}".encode()).hexdigest()[:16]
        headers = {
            "Retry-After": str(math.ceil(wait)),
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": f"{time.time() + wait:.3f}",
            "X-RateLimit-Reset-After": f"{wait:.3f}",
            "X-RateLimit-Bucket": bucket,
            "X-RateLimit-Scope": "user",
            # discord.py treats a 429 without Via as a Cloudflare ban and raises at once.
            "Via": "1.1 google",
        }
        return _json(fault.body or body, 429, headers)

    async def _read_body(self, request: web.Request) -> tuple[Any, list[dict]]:
        """A JSON body, or multipart `payload_json` plus `files[n]` parts."""
        if request.content_type == "multipart/form-data":
            form = await request.post()
            payload = json.loads(str(form.get("payload_json", "{}")))
            files = [
                {"filename": v.filename, "content_type": v.content_type, "data": v.file.read()}
                for v in form.values()
                if isinstance(v, web.FileField)
            ]
            return payload, files
        return (await request.json() if request.body_exists else {}), []

    def _channel(self, request: web.Request) -> dict:
        channel = self._channels.get(_snow(request.match_info["cid"]))
        if channel is None:
            raise ApiError(404, 10003, "Unknown Channel")
        return channel

    def _message(self, channel: dict, raw_id: str) -> dict:
        message = self._messages.get(_snow(raw_id, 10008, "Unknown Message"))
        if message is None or message["channel_id"] != channel["id"]:
            raise ApiError(404, 10008, "Unknown Message")
        return message

    @staticmethod
    def _check_content(body: dict, *path: str) -> None:
        if len(str(body.get("content") or "")) > CONTENT_LIMIT:
            error = content_too_long_error(*path, "content")
            raise ApiError(400, 50035, "Invalid Form Body", error)

    # -- REST handlers ------------------------------------------------------------------------

    async def _get_me(self, request: web.Request) -> web.Response:
        extra = {"verified": True, "mfa_enabled": False, "email": None, "locale": "en-US"}
        return _json({**self.bot_user, **extra, "premium_type": 0})

    async def _get_application(self, request: web.Request) -> web.Response:
        return _json(self._application())

    def _application(self) -> dict:
        flags = APP_FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED if self.message_content_intent else 0
        return make_application(self.application_id, self.bot_name, self._owner, flags=flags)

    async def _get_gateway(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {"url": self.gateway_url}
        if request.path.endswith("/bot"):
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            body.update(shards=self.shard_count, session_start_limit=limit)
        return _json(body)

    async def _create_dm(self, request: web.Request) -> web.Response:
        body = await request.json()
        return _json(self._dm_channel(_snow(str(body.get("recipient_id")), 10013, "Unknown User")))

    async def _get_channel(self, request: web.Request) -> web.Response:
        return _json(self._channel(request))

    async def _get_history(self, request: web.Request) -> web.Response:
        history = self._history.get(int(self._channel(request)["id"]), [])
        history = [m for m in history if not m["flags"] & EPHEMERAL_FLAG]
        limit = int(request.query.get("limit", 50))
        # like Discord: `after` gives the oldest `limit` messages after that id, `before` the
        # newest before it; either way the page comes newest first
        if "after" in request.query:
            after = int(request.query["after"])
            return _json(list(reversed([m for m in history if int(m["id"]) > after][:limit])))
        if "before" in request.query:
            before = int(request.query["before"])
            history = [m for m in history if int(m["id"]) < before]
        return _json(list(reversed(history))[:limit])

    async def _get_message(self, request: web.Request) -> web.Response:
        return _json(self._message(self._channel(request), request.match_info["mid"]))

    async def _create_message(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        body, files = await self._read_body(request)
        self._check_content(body)
        keys = ("content", "embeds", "sticker_ids", "components", "poll")
        if not files and not any(body.get(k) for k in keys):
            raise ApiError(400, 50006, "Cannot send an empty message")
        known = self._nonced(body)
        if known is not None:  # Discord's enforce_nonce: the first message, nothing new
            self.nonce_hits.append(known)
            return _json(known)
        message = self._bot_message(int(channel["id"]), body, files)
        if body.get("enforce_nonce") and body.get("nonce") is not None:
            self._nonces[str(body["nonce"])] = (time.monotonic(), message)
        self.sent.append(message)
        await self._echo("MESSAGE_CREATE", message)
        return _json(message)

    def _nonced(self, body: dict) -> dict | None:
        """The bot's message created with this nonce within `nonce_window_s`, when the request
        sets ``enforce_nonce`` (without it, Discord creates a new message every time)."""
        nonce = body.get("nonce")
        if not body.get("enforce_nonce") or nonce is None:
            return None
        found = self._nonces.get(str(nonce))
        if found is None or time.monotonic() - found[0] > self.nonce_window_s:
            return None
        return found[1]

    async def _edit_message(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        message = self._message(channel, request.match_info["mid"])
        if message["author"]["id"] != self.bot_user["id"]:
            raise ApiError(403, 50005, "Cannot edit a message authored by another user")
        body, files = await self._read_body(request)
        self._apply_edit(message, body, files)
        self.edits.append({"channel_id": int(channel["id"]), "message_id": int(message["id"])})
        self.edits[-1].update(body)
        await self._echo("MESSAGE_UPDATE", message)
        return _json(message)

    async def _delete_message(self, request: web.Request) -> web.Response:
        message = self._message(self._channel(request), request.match_info["mid"])
        await self._remove_message(message)
        return web.Response(status=204)

    async def _trigger_typing(self, request: web.Request) -> web.Response:
        self.typing.append(int(self._channel(request)["id"]))
        return web.Response(status=204)

    async def _react(self, request: web.Request) -> web.Response:
        channel = self._channel(request)
        message = self._message(channel, request.match_info["mid"])
        self.reactions.append(
            {
                "channel_id": int(channel["id"]),
                "message_id": int(message["id"]),
                "emoji": unquote(request.match_info["emoji"]),
                "action": "add" if request.method == "PUT" else "remove",
            }
        )
        return web.Response(status=204)

    async def _attachment(self, request: web.Request) -> web.StreamResponse:
        self.file_requests.append({"path": request.path, "headers": dict(request.headers)})
        if self._file_faults:
            return web.Response(status=self._file_faults.pop(0), text="CDN error")
        if not self._link_alive(request):
            return web.Response(status=404, text="This content is no longer available.")
        stored = self._files.get(_snow(request.match_info["aid"]))
        if stored is None:
            return _json(make_error(0, "404: Not Found"), 404)
        data, content_type, chunked = stored
        if not chunked:
            return web.Response(body=data, headers={"Content-Type": content_type})
        return await chunked_response(request, data, content_type)

    def _cdn_link(self, path: str, attachment_id: int, expires_in: float | None = None) -> str:
        issued = int(time.time() + self.cdn_clock_skew)
        expiry = issued + int(self.link_lifetime_s if expires_in is None else expires_in)
        mac = self._link_mac(attachment_id, expiry, issued)
        return f"{self.url}{path}?ex={expiry:x}&is={issued:x}&hm={mac}"

    def _link_mac(self, attachment_id: int, expiry: int, issued: int) -> str:
        signed = f"{attachment_id}|{expiry:x}|{issued:x}".encode()
        return hmac.new(self._cdn_key, signed, "sha256").hexdigest()[:32]

    def _link_alive(self, request: web.Request) -> bool:
        query = request.query
        try:
            expiry, issued = int(query["ex"], 16), int(query["is"], 16)
            mac = self._link_mac(int(request.match_info["aid"]), expiry, issued)
        except (KeyError, ValueError):
            return False
        alive = expiry > time.time() + self.cdn_clock_skew
        return alive and hmac.compare_digest(query.get("hm", ""), mac)

    async def _refresh_urls(self, request: web.Request) -> web.Response:
        urls = (await request.json()).get("attachment_urls")
        if not isinstance(urls, list) or not 1 <= len(urls) <= 50:
            raise ApiError(400, 50035, "Invalid Form Body")
        self.refreshed.extend(urls)
        pairs = [{"original": u, "refreshed": self._refreshed_link(str(u))} for u in urls]
        return _json({"refreshed_urls": pairs})

    def _refreshed_link(self, url: str) -> str:
        # like Discord, a link to a file that is gone (or not a CDN link) comes back unchanged
        match = re.match(re.escape(self.url) + r"(/attachments/\d+/(\d+)/[^?#]+)", url)
        if match is None or int(match[2]) not in self._files:
            return url
        return self._cdn_link(match[1], int(match[2]))

    def delete_file(self, attachment: dict) -> None:
        """Forget an attachment's bytes, as when its message is deleted: its links die."""
        self._files.pop(int(attachment["id"]), None)

    def fail_file_next(self, status: int = 500, times: int = 1) -> None:
        """Answer the next ``times`` attachment downloads with ``status``."""
        self._file_faults.extend([status] * times)

    async def _commands(self, request: web.Request) -> web.Response:
        if _snow(request.match_info["app"], 10002, "Unknown Application") != self.application_id:
            raise ApiError(403, 50001, "Missing Access")
        gid = request.match_info.get("gid")
        guild_id = _snow(gid, 10004, "Unknown Guild") if gid else None
        if request.method == "PUT":
            registered = [
                make_app_command(
                    self._command_ids.setdefault((c["name"], guild_id), snowflake()),
                    self.application_id,
                    c,
                    guild_id,
                )
                for c in await request.json()
            ]
            if guild_id is None:
                self._global_commands = registered
            else:
                self._guild_commands[guild_id] = registered
        if guild_id is None:
            return _json(self._global_commands)
        return _json(self._guild_commands.get(guild_id, []))

    @property
    def commands(self) -> list[dict]:
        """Registered application commands: global ones, then every guild's."""
        per_guild = [c for cs in self._guild_commands.values() for c in cs]
        return [*self._global_commands, *per_guild]

    # -- interactions -------------------------------------------------------------------------

    def _interaction(self, request: web.Request) -> _Interaction:
        inter = self._interactions.get(request.match_info["itoken"])
        iid, app = request.match_info.get("iid"), request.match_info.get("app")
        if inter is None or iid not in (None, str(inter.id)):
            raise ApiError(404, 10062, "Unknown interaction")
        if app not in (None, str(self.application_id)):
            raise ApiError(404, 10015, "Unknown Webhook")
        if app is not None and time.time() - inter.created > self.interaction_lifetime_s:
            raise ApiError(401, 50027, "Invalid Webhook Token")
        return inter

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        inter = self._interaction(request)
        if inter.responded:
            raise ApiError(400, 40060, "Interaction has already been acknowledged.")
        body, files = await self._read_body(request)
        callback_type, data = int(body.get("type", 0)), body.get("data") or {}
        message = None
        if callback_type == 4:  # CHANNEL_MESSAGE_WITH_SOURCE
            self._check_content(data, "data")
            message = self._interaction_message(inter, data, files)
        elif callback_type == 5:  # DEFERRED: a "thinking..." message, replaced by a followup
            message = self._interaction_message(inter, {"flags": data.get("flags", 0)}, [])
            message["flags"] |= LOADING_FLAG
        inter.responded = True
        record = {"kind": "callback", "interaction_id": inter.id, "token": inter.token}
        self.interaction_responses.append({**record, **body})
        if message is not None:
            await self._echo("MESSAGE_CREATE", message)
        if request.query.get("with_response") not in ("1", "true", "True"):
            return web.Response(status=204)
        return _json(make_interaction_callback(inter.id, callback_type, message))

    def _interaction_message(self, inter: _Interaction, body: dict, files: list[dict]) -> dict:
        in_guild = bool(self._channels[inter.channel_id].get("guild_id"))
        guild = self._channels[inter.channel_id].get("guild_id")
        owners = {"0": str(guild)} if in_guild else {"1": inter.user["id"]}
        metadata = {
            "id": str(inter.id),
            "type": 2,
            "user": inter.user,
            "authorizing_integration_owners": owners,
        }
        legacy = {"id": str(inter.id), "type": 2, "name": inter.command, "user": inter.user}
        message = self._bot_message(
            inter.channel_id,
            body,
            files,
            type=20,
            webhook_id=str(self.application_id),
            application_id=str(self.application_id),
            interaction_metadata=metadata,
            interaction=legacy,
        )
        inter.original = message
        return message

    async def _followup(self, request: web.Request) -> web.Response:
        inter = self._interaction(request)
        body, files = await self._read_body(request)
        self._check_content(body)
        original, event = inter.original, "MESSAGE_CREATE"
        if original is not None and original["flags"] & LOADING_FLAG:
            # The first followup after a deferral replaces the "thinking..." message.
            self._apply_edit(original, body, files)
            original["flags"] &= ~LOADING_FLAG
            message, event = original, "MESSAGE_UPDATE"
        else:
            app = str(self.application_id)
            message = self._bot_message(
                inter.channel_id, body, files, webhook_id=app, application_id=app
            )
        record = {"kind": "followup", "interaction_id": inter.id, "token": inter.token}
        self.interaction_responses.append({**record, **body})
        await self._echo(event, message)
        return _json(message)

    async def _webhook_msg(self, request: web.Request) -> web.StreamResponse:
        inter = self._interaction(request)
        mid = request.match_info["mid"]
        if mid == "@original":
            message = inter.original
        else:
            message = self._messages.get(_snow(mid, 10008, "Unknown Message"))
        if message is None or int(message["channel_id"]) != inter.channel_id:
            raise ApiError(404, 10008, "Unknown Message")
        if request.method == "GET":
            return _json(message)
        if request.method == "DELETE":
            await self._remove_message(message)
            return web.Response(status=204)
        body, files = await self._read_body(request)
        self._apply_edit(message, body, files)
        message["flags"] &= ~LOADING_FLAG  # editing the original ends "thinking..."
        record = {"kind": "edit", "interaction_id": inter.id, "token": inter.token}
        self.interaction_responses.append({**record, "message_id": int(message["id"]), **body})
        await self._echo("MESSAGE_UPDATE", message)
        return _json(message)

    # -- message store ------------------------------------------------------------------------

    def _bot_message(self, channel_id: int, body: dict, files: list[dict], **extra: Any) -> dict:
        """Create and store a message authored by the bot (REST send, interaction, followup)."""
        guild_id = self._channels[channel_id].get("guild_id")
        reference, referenced = None, None
        if body.get("message_reference"):
            reference = {"channel_id": str(channel_id), **body["message_reference"]}
            for key in ("message_id", "channel_id", "guild_id"):  # clients may send ints
                if reference.get(key) is not None:
                    reference[key] = str(reference[key])
            referenced = self._messages.get(int(reference.get("message_id") or 0))
            if referenced is None and reference.get("fail_if_not_exists", True):
                detail = {"code": "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "message": "Unknown message"}
                errors = {"message_reference": {"_errors": [detail]}}
                body = make_error(50035, "Invalid Form Body", errors)
                raise ApiError(400, 50035, "Invalid Form Body", body)
        for f in files:
            self.uploads.append({"channel_id": channel_id, **f})
        message = make_message(
            snowflake(),
            channel_id,
            self.bot_user,
            body.get("content") or "",
            guild_id=int(guild_id) if guild_id else None,
            member=make_member() if guild_id else None,
            attachments=[self._store_file(channel_id, **f) for f in files],
            message_reference=reference,
            referenced_message=_without_reference(referenced),
            embeds=body.get("embeds") or [],
            components=body.get("components") or [],
            flags=int(body.get("flags") or 0),
            tts=bool(body.get("tts")),
            **extra,
        )
        if body.get("nonce") is not None:
            message["nonce"] = body["nonce"]
        self._store(message)
        return message

    def _apply_edit(self, message: dict, body: dict, files: list[dict]) -> None:
        self._check_content(body)
        for key in ("content", "embeds", "components", "flags"):
            if body.get(key) is not None:
                message[key] = body[key]
        if "attachments" in body or files:
            keep = {str(a.get("id")) for a in body.get("attachments") or []}
            kept = [a for a in message["attachments"] if a["id"] in keep]
            added = [self._store_file(int(message["channel_id"]), **f) for f in files]
            message["attachments"] = kept + added
        message["edited_timestamp"] = iso_now()

    async def _remove_message(self, message: dict) -> None:
        channel_id, message_id = int(message["channel_id"]), int(message["id"])
        self._messages.pop(message_id, None)
        history = self._history.get(channel_id, [])
        if message in history:
            history.remove(message)
        self.deleted.append({"channel_id": channel_id, "message_id": message_id})
        event = {"id": message["id"], "channel_id": message["channel_id"]}
        if "guild_id" in message:
            event["guild_id"] = message["guild_id"]
        await self._echo("MESSAGE_DELETE", event)

    def _store(self, message: dict) -> None:
        self._messages[int(message["id"])] = message
        self._history.setdefault(int(message["channel_id"]), []).append(message)

    def _store_file(
        self,
        channel_id: int,
        filename: str,
        data: bytes = b"",
        content_type: str | None = None,
        size: int | None = None,
        chunked: bool = False,
        expires_in: float | None = None,
        **_: Any,
    ) -> dict:
        """Keep the bytes and return an attachment whose url this fake serves (like the CDN).
        ``size`` overrides the announced size; ``chunked`` serves it without a Content-Length;
        the signed link dies after ``expires_in`` s (`link_lifetime_s`; negative: already)."""
        attachment_id = snowflake()
        self._files[attachment_id] = (data, content_type or "application/octet-stream", chunked)
        path = f"/attachments/{channel_id}/{attachment_id}/{quote(filename, safe='')}"
        url = self._cdn_link(path, attachment_id, expires_in)
        return make_attachment(
            filename,
            url=url,
            attachment_id=attachment_id,
            size=len(data) if size is None else size,
            content_type=content_type,
        )

    def add_file(
        self,
        filename: str,
        data: bytes,
        content_type: str | None = None,
        *,
        channel_id: int | None = None,
        size: int | None = None,
        chunked: bool = False,
        expires_in: float | None = None,
    ) -> dict:
        """Register a file on the fake CDN; returns its attachment payload, for
        `send_message(attachments=[...])` (see `_store_file` for the keywords)."""
        channel = channel_id or self.channel_id
        return self._store_file(channel, filename, data, content_type, size, chunked, expires_in)

    def messages_in(self, channel_id: int) -> list[dict]:
        """Every message currently in a channel (users' and the bot's), oldest first."""
        return list(self._history.get(channel_id, []))

    def _user(self, user_id: int, username: str | None = None, bot: bool = False) -> dict:
        user = self._users.get(user_id)
        name = username or (user["username"] if user else f"user{user_id}")
        if user is None or (user["username"], user["bot"]) != (name, bot):
            user = make_user(user_id, name, bot=bot)
            self._users[user_id] = user
        return user

    def _dm_channel(self, user_id: int, username: str | None = None) -> dict:
        recipient = self._user(user_id, username)
        if user_id not in self._dms:
            channel_id = snowflake()
            self._channels[channel_id] = make_dm_channel(channel_id, recipient)
            self._dms[user_id] = channel_id
        return self._channels[self._dms[user_id]]

    def _guild_payload(self, guild_id: int | None = None) -> dict:
        guild_id = guild_id or self.guild_id
        channels = [c for c in self._channels.values() if c.get("guild_id") == str(guild_id)]
        return make_guild(
            guild_id,
            owner_id=int(self._owner["id"]),
            channels=[c for c in channels if c["type"] not in _THREAD_TYPES],
            threads=[c for c in channels if c["type"] in _THREAD_TYPES],
            roles=[make_role(guild_id)],  # @everyone's id is the guild's id
            members=[make_member(self.bot_user)],
        )

    def add_guild(self, guild_id: int, channel_id: int) -> None:
        """Another guild the bot is in, with one text channel (call before connecting: its
        GUILD_CREATE comes with the next IDENTIFY of its shard)."""
        self._guilds.append(guild_id)
        self._channels[channel_id] = make_channel(channel_id, guild_id)

    @staticmethod
    def shard_of(guild_id: int | None, count: int) -> int:
        """Discord's rule: a guild's events go to shard (guild_id >> 22) % count; DMs to 0."""
        return 0 if guild_id is None else (guild_id >> 22) % count

    # -- injection (thread-safe) --------------------------------------------------------------

    def send_message(
        self,
        content: str = "hi",
        user_id: int = 42,
        username: str = "alice",
        channel_id: int | None = None,
        guild: bool = True,
        mentions_bot: bool = False,
        reply_to: int | dict | None = None,
        attachments: list[dict] | None = None,
        author_bot: bool = False,
        thread_id: int | None = None,
    ) -> dict:
        """Dispatch MESSAGE_CREATE from a user and return the full (unstripped) payload.

        `mentions_bot` prepends `<@bot_id>` unless the content has it. `reply_to` is a message id
        or payload; the replied-to author is mentioned, as Discord's default reply pings.
        `attachments` entries: {"filename", "data": bytes, "content_type"}, served by the fake.
        """

        async def go() -> dict:
            channel = self._target_channel(channel_id, guild, thread_id, user_id, username)
            author = self._user(user_id, username, bot=author_bot)
            message = self._user_message(
                content, author, channel, mentions_bot, reply_to, attachments or []
            )
            await self._dispatch("MESSAGE_CREATE", message)
            return message

        return self.call(go)

    def send_dm(self, content: str = "hi", user_id: int = 42, **kwargs: Any) -> dict:
        """A direct message from `user_id`; its DM channel is created on first use."""
        return self.send_message(content, user_id=user_id, guild=False, **kwargs)

    def _target_channel(
        self, channel_id: int | None, guild: bool, thread_id: int | None, user_id: int, name: str
    ) -> dict:
        if not guild:
            return self._dm_channel(user_id, name)
        target = thread_id or channel_id or self.channel_id
        channel = self._channels.get(target)
        if channel is None or not channel.get("guild_id"):
            raise KeyError(f"unknown guild channel {target} (threads come from create_thread())")
        return channel

    def _user_message(
        self,
        content: str,
        author: dict,
        channel: dict,
        mentions_bot: bool,
        reply_to: int | dict | None,
        attachments: list[dict],
    ) -> dict:
        in_guild = bool(channel.get("guild_id"))
        guild_id = int(channel["guild_id"]) if in_guild else None
        mentions: list[dict] = []
        if mentions_bot:
            tag = f"<@{self.bot_id}>"
            content = content if tag in content else f"{tag} {content}"
            mentions.append(self.bot_user)
        reference, referenced = None, None
        if reply_to is not None:
            ref_id = int(reply_to["id"] if isinstance(reply_to, dict) else reply_to)
            referenced = self._messages.get(ref_id)
            reference = {"type": 0, "message_id": str(ref_id), "channel_id": channel["id"]}
            if in_guild:
                reference["guild_id"] = str(guild_id)
            if referenced is not None and referenced["author"] not in mentions:
                mentions.append(referenced["author"])
        if in_guild:
            mentions = [{**m, "member": make_member()} for m in mentions]
        channel_id = int(channel["id"])
        message = make_message(
            snowflake(),
            channel_id,
            author,
            content,
            guild_id=guild_id,
            member=make_member() if in_guild else None,
            mentions=mentions,
            attachments=[
                a if "url" in a else self._store_file(channel_id, **a) for a in attachments
            ],
            message_reference=reference,
            referenced_message=_without_reference(referenced),
        )
        self._store(message)
        return message

    def create_thread(
        self, parent_channel_id: int | None = None, name: str = "t", owner_id: int = 42
    ) -> int:
        """Create a public thread under a guild channel (THREAD_CREATE); returns its id."""

        async def go() -> int:
            thread_id = snowflake()
            parent = parent_channel_id or self.channel_id
            guild_id = int(self._channels[parent]["guild_id"])
            thread = make_thread(thread_id, guild_id, parent, owner_id, name)
            self._channels[thread_id] = thread
            await self._dispatch("THREAD_CREATE", {**thread, "newly_created": True})
            return thread_id

        return self.call(go)

    def send_interaction(
        self,
        command: str = "stop",
        user_id: int = 42,
        channel_id: int | None = None,
        options: dict[str, Any] | list[dict] | None = None,
        username: str = "alice",
        guild: bool = True,
    ) -> dict:
        """Dispatch INTERACTION_CREATE for slash command `command` (options: {name: value})."""

        async def go() -> dict:
            channel = self._target_channel(channel_id, guild, None, user_id, username)
            user = self._user(user_id, username)
            guild_id = int(channel["guild_id"]) if guild else None
            key = (command, guild_id)
            command_id = self._command_ids.get(key) or self._command_ids.get((command, None))
            token = secrets.token_urlsafe(32)
            inter = _Interaction(snowflake(), token, command, int(channel["id"]), user)
            self._interactions[inter.token] = inter
            payload = make_interaction(
                inter.id,
                self.application_id,
                inter.token,
                command_id=command_id or snowflake(),
                command_name=command,
                channel=channel,
                guild_id=guild_id,
                member=make_member(user, permissions=EVERYONE_PERMISSIONS) if guild else None,
                user=None if guild else user,
                options=make_command_options(options),
            )
            await self._dispatch("INTERACTION_CREATE", payload)
            return payload

        return self.call(go)

    def dispatch(self, event: str, data: dict) -> None:
        """Dispatch any gateway event (e.g. MESSAGE_REACTION_ADD) to the live session."""
        self.call(lambda: self._dispatch(event, data))

    def reconnect(self) -> None:
        """op 7: the client must reconnect and RESUME; dispatches meanwhile queue for replay."""

        async def go() -> None:
            await self._send(self._take_live_conn(), {"op": 7, "d": None, "s": None, "t": None})

        self.call(go)

    def invalid_session(self, resumable: bool = False, shard: int | None = None) -> None:
        """op 9. Not resumable: the session is gone; the client must IDENTIFY again. To the
        latest session, or to ``shard``'s."""

        async def go() -> None:
            conn = self._take_live_conn(None if shard is None else self._shards[shard])
            if not resumable and conn.session is not None:
                self._sessions.pop(conn.session.session_id, None)
                self._shards.pop(conn.session.shard[0], None)
                self._session = None
            await self._send(conn, {"op": 9, "d": resumable, "s": None, "t": None})

        self.call(go)

    def drop_socket(self, code: int | None = None) -> None:
        """Close the gateway socket without a close frame (1006), or with `code` (e.g. 4000)."""

        async def go() -> None:
            conn = self._take_live_conn()
            if code is None:
                if conn.transport is not None:
                    conn.transport.abort()
                return
            # Not awaited here: the close handshake needs the client's loop, which may be the
            # very thread blocked in this call.
            task = asyncio.ensure_future(conn.ws.close(code=code, message=b"dropped"))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        self.call(go)

    # -- gateway ------------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(timeout=1.0, max_msg_size=0)
        await ws.prepare(request)
        conn = _Conn(ws, request.transport)
        self._conns.append(conn)
        try:
            hello = {"heartbeat_interval": int(self.heartbeat_interval * 1000)}
            await self._send(conn, {"op": 10, "d": hello, "s": None, "t": None})
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    await self._on_frame(conn, json.loads(msg.data))
        except Exception as exc:
            self.errors.append(exc)
            raise
        finally:
            self._conns.remove(conn)
            if conn.session is not None and conn.session.conn is conn:
                conn.session.conn = None
                if conn.session is self._session:
                    self.connected.clear()
        return ws

    async def _on_frame(self, conn: _Conn, frame: dict) -> None:
        op, data = frame.get("op"), frame.get("d")
        self.ops.append(op)
        if op == 1:
            await self._send(conn, {"op": 11, "d": None, "s": None, "t": None})
        elif op == 2:
            await self._identify(conn, data)
        elif op == 6:
            await self._resume(conn, data)
        elif conn.session is None:
            await conn.ws.close(code=4003, message=b"Not authenticated.")
        elif op not in (3, 4, 8):  # presence, voice state, member requests: accepted, ignored
            await conn.ws.close(code=4001, message=b"Unknown opcode.")

    async def _identify(self, conn: _Conn, data: dict) -> None:
        self.identifies += 1
        if conn.session is not None:
            await conn.ws.close(code=4005, message=b"Already authenticated.")
            return
        if data.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents") or 0)
        if intents & MESSAGE_CONTENT_INTENT and not self.message_content_intent:
            await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        shard_id, count = data.get("shard") or (0, 1)
        if not 0 <= shard_id < count:
            await conn.ws.close(code=4010, message=b"Invalid shard.")
            return
        self.intents = intents
        self.identified.append((shard_id, count))
        self.identify_times.append(time.monotonic())
        session = _Session(secrets.token_hex(16), intents, (shard_id, count))
        self._sessions[session.session_id] = session
        self._session, conn.session, session.conn = session, session, conn
        self._shards[shard_id] = session
        guilds = [g for g in self._guilds if self.shard_of(g, count) == shard_id]
        ready = make_ready(
            self.bot_user,
            guilds,
            session.session_id,
            self.gateway_url,
            self._application(),
            (shard_id, count),
        )
        await self._dispatch_to(session, "READY", ready)
        for guild_id in guilds:
            await self._dispatch_to(session, "GUILD_CREATE", self._guild_payload(guild_id))
        self.connected.set()

    async def _resume(self, conn: _Conn, data: dict) -> None:
        self.resumes += 1
        if data.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        session = self._sessions.get(data.get("session_id") or "")
        if session is None:
            await self._send(conn, {"op": 9, "d": False, "s": None, "t": None})
            return
        conn.session, session.conn = session, None
        self._session = self._shards[session.shard[0]] = session
        # discord.py writes a key into RESUMED's `d`, so it must be an object, never null.
        await self._dispatch_to(session, "RESUMED", {"_trace": ["fake-discord"]})
        # Replay what the client missed (RESUMED last); dispatches racing in append to
        # `frames` and are picked up before the socket is attached.
        last = int(data.get("seq") or 0)
        while pending := [f for f in session.frames if f["s"] > last]:
            for frame in pending:
                await self._send(conn, frame)
                last = frame["s"]
        session.conn = conn
        self.connected.set()

    def _take_live_conn(self, session: _Session | None = None) -> _Conn:
        """Detach the live session (or ``session``) from its socket, so new dispatches queue
        for RESUME."""
        session = session or self._session
        if session is None or session.conn is None:
            raise RuntimeError("no live gateway session")
        conn, session.conn = session.conn, None
        self.connected.clear()
        return conn

    async def _dispatch(self, event: str, data: dict) -> None:
        # Like Discord, events with no session (client not identified yet) are lost; a guild's
        # events go only to the session of its shard
        guild = _guild_of(event, data)
        sessions = [s for n, s in self._shards.items() if n == self.shard_of(guild, s.shard[1])]
        if not sessions:
            self.undelivered.append((event, data))
        for session in sessions:
            await self._dispatch_to(session, event, data)

    def sessions_by_shard(self) -> dict[int, bool]:
        """Each shard id seen, and whether its latest session has a live socket."""
        return {n: s.conn is not None for n, s in sorted(self._shards.items())}

    async def _dispatch_to(self, session: _Session, event: str, data: dict) -> None:
        session.seq += 1
        frame = {"op": 0, "t": event, "s": session.seq, "d": self._visible(event, data, session)}
        session.frames.append(frame)
        if session.conn is not None:
            await self._send(session.conn, frame)

    def _visible(self, event: str, data: dict, session: _Session) -> dict:
        """What the session may see: without the MESSAGE_CONTENT intent, other users' guild
        messages arrive with empty content unless they mention the bot (DMs keep theirs)."""
        data = copy.deepcopy(data)
        if event not in ("MESSAGE_CREATE", "MESSAGE_UPDATE") or "guild_id" not in data:
            return data
        bot = self.bot_user["id"]
        if session.intents & MESSAGE_CONTENT_INTENT or data.get("author", {}).get("id") == bot:
            return data
        if any(m.get("id") == bot for m in data.get("mentions", [])):
            return data
        data.update(content="", embeds=[], attachments=[], components=[])
        data.pop("poll", None)
        return data

    async def _echo(self, event: str, data: dict) -> None:
        if self.echo_bot_messages and not int(data.get("flags", 0)) & EPHEMERAL_FLAG:
            await self._dispatch(event, data)

    async def _send(self, conn: _Conn, frame: dict) -> None:
        if conn.ws.closed:
            return
        try:
            await conn.ws.send_str(json.dumps(frame))
        except (ConnectionResetError, RuntimeError):
            pass  # the client went away mid-send; RESUME replays session frames


def _guild_of(event: str, data: dict) -> int | None:
    """The guild an event belongs to; None (shard 0) for a DM, or an id that is no snowflake
    (the fuzz tests send those)."""
    whole_guild = event in ("GUILD_CREATE", "GUILD_UPDATE", "GUILD_DELETE")
    raw = data.get("guild_id") or (data.get("id") if whole_guild else None)
    try:
        return int(raw) if raw and not isinstance(raw, bool) else None
    except (TypeError, ValueError):
        return None


def _without_reference(message: dict | None) -> dict | None:
    # Discord nests one level only: a referenced message carries no referenced_message.
    if message is None:
        return None
    return {k: v for k, v in message.items() if k != "referenced_message"}
