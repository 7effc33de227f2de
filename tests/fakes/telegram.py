"""Wire-level fake of the Telegram Bot API, for driving real SDKs (python-telegram-bot) offline.

Tests inject updates and inspect what the bot sent; ``python -m tests.fakes.telegram`` serves it
to other processes (benchmarks, e2e) with a small control API under ``/_fake/``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import re
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from http import HTTPStatus
from typing import Any, TypeVar

import aiohttp
from aiohttp import web

from tests.fakes.server import FakeServer, async_wait_until

JSON = dict[str, Any]
R = TypeVar("R")
MAX_TEXT, MAX_CAPTION = 4096, 1024


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


HTML_TAGS = _words("b strong i em u ins s strike del a code pre tg-spoiler span blockquote")
HTML_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
CHAT_ACTIONS = _words(
    "typing upload_photo record_video upload_video record_voice upload_voice upload_document "
    "choose_sticker find_location record_video_note upload_video_note"
)
# Bot API parameters typed String: PTB sends them raw, and JSON-encodes every other value.
STRING_PARAMS = _words(
    "text caption parse_mode url secret_token action file_id callback_query_id inline_message_id "
    "business_connection_id message_effect_id language_code emoji ip_address document photo "
    "certificate thumbnail file_name description title"
)
RECORD_KEYS = ("message_thread_id", "parse_mode", "reply_parameters", "reply_markup")
BOT_CAPABILITIES = {"can_join_groups": True, "can_read_all_group_messages": False}
WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)
POLL_CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)
NOT_MODIFIED = (
    "message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)
QUERY_TOO_OLD = "query is too old and response timeout expired or query ID is invalid"
COMMAND_RE = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,32})?")
MENTION_RE = re.compile(r"(?<![\w@/])@[A-Za-z0-9_]{5,32}\b")
COMMAND_NAME_RE = re.compile(r"[a-z0-9_]{1,32}")
DOWNLOAD_CHUNK = 64 * 1024  # file downloads are streamed in pieces this size


class ApiError(Exception):
    """A Bot API error reply: ``{"ok": false, "error_code": N, "description": ...}``."""

    def __init__(
        self,
        status: int,
        description: str,
        retry_after: int | None = None,
        raw_body: str | None = None,
    ) -> None:
        super().__init__(description)
        self.status, self.description = status, description
        self.retry_after, self.raw_body = retry_after, raw_body

    def response(self) -> web.Response:
        if self.raw_body is not None:  # e.g. the HTML page nginx serves for a 502
            return web.Response(status=self.status, text=self.raw_body, content_type="text/html")
        body: JSON = {"ok": False, "error_code": self.status, "description": self.description}
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return web.json_response(body, status=self.status)


def bad_request(what: str) -> ApiError:
    return ApiError(400, f"Bad Request: {what}")


# -- payload factories (public so tests can craft variants) ---------------------------------


def utf16_len(text: str) -> int:
    """Telegram measures text and entity offsets in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def parse_entities(text: str) -> list[JSON]:
    """The entities Telegram's server adds itself: a leading bot_command and @mentions."""
    found = [("bot_command", m) for m in [COMMAND_RE.match(text)] if m]
    found += [("mention", m) for m in MENTION_RE.finditer(text)]
    return [
        {"type": kind, "offset": utf16_len(text[: m.start()]), "length": utf16_len(m.group())}
        for kind, m in found
    ]


def make_user(
    user_id: int, username: str | None = None, first_name: str | None = None, is_bot: bool = False
) -> JSON:
    user: JSON = {"id": user_id, "is_bot": is_bot, "first_name": first_name or "User"}
    if username:
        user["username"] = username
    return user


def make_chat(
    chat_id: int | str,
    chat_type: str = "private",
    *,
    username: str | None = None,
    title: str | None = None,
    is_forum: bool = False,
) -> JSON:
    chat: JSON = {"id": chat_id, "type": chat_type}
    if chat_type == "private":
        chat["first_name"] = "User"
    else:
        chat["title"] = title or f"Test {chat_type}"
    if username:
        chat["username"] = username
    if is_forum:
        chat["is_forum"] = True
    return chat


def make_message(
    message_id: int,
    chat: JSON,
    from_user: JSON | None = None,
    text: str | None = None,
    *,
    thread_id: int | None = None,
    reply_to: JSON | None = None,
    date: int | None = None,
    **extra: Any,
) -> JSON:
    msg: JSON = {"message_id": message_id, "date": date or int(time.time()), "chat": chat}
    if from_user is not None:
        msg["from"] = from_user
    if text is not None:
        msg["text"] = text
        if entities := parse_entities(text):
            msg["entities"] = entities
    if thread_id is not None:
        msg.update(message_thread_id=thread_id, is_topic_message=True)
    if reply_to is not None:  # Telegram never nests replies more than one level deep
        msg["reply_to_message"] = {k: v for k, v in reply_to.items() if k != "reply_to_message"}
    msg.update(extra)
    return msg


def make_update(update_id: int, kind: str = "message", payload: JSON | None = None) -> JSON:
    return {"update_id": update_id, kind: payload or {}}


def make_callback_query(query_id: str, from_user: JSON, message: JSON, data: str) -> JSON:
    return {
        "id": query_id,
        "from": from_user,
        "message": message,
        "chat_instance": "1",
        "data": data,
    }


def update_kind(update: JSON) -> str:
    return next((k for k in update if k != "update_id"), "")


class _HtmlChecker(HTMLParser):
    """Telegram's HTML parse mode: a few tags, balanced, no bare '<'; collects the plain text."""

    def __init__(self, raw: str) -> None:
        super().__init__(convert_charrefs=False)  # so '&lt;' and a bare '<' stay distinguishable
        self.raw = raw
        self.stack: list[str] = []
        self.parts: list[str] = []

    def fail(self, what: str) -> None:
        line, col = self.getpos()
        chars = sum(len(s) for s in self.raw.splitlines(keepends=True)[: line - 1]) + col
        offset = len(self.raw[:chars].encode())
        raise bad_request(f"can't parse entities: {what} at byte offset {offset}")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in HTML_TAGS:
            self.fail(f'Unsupported start tag "{tag}"')
        if tag == "span" and ("class", "tg-spoiler") not in attrs:
            self.fail('Tag "span" must have class "tg-spoiler"')
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack:
            self.fail("Unexpected end tag")
        if self.stack[-1] != tag:
            self.fail(f'Unmatched end tag, expected "</{self.stack[-1]}>", found "</{tag}>"')
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if "<" in data:
            self.fail("Unexpected end of name token")
        self.parts.append(data)

    def handle_entityref(self, name: str) -> None:
        self.parts.append(HTML_ENTITIES.get(name, f"&{name};"))

    def handle_charref(self, name: str) -> None:
        self.parts.append(chr(int(name[1:], 16) if name[:1] in "xX" else int(name)))


def plain_text(text: str, parse_mode: str | None) -> str:
    """The text after entity parsing (what Telegram counts); raises ApiError on bad HTML."""
    if (parse_mode or "").lower() != "html":
        return text
    checker = _HtmlChecker(text)
    checker.feed(text)
    checker.close()
    if checker.stack:
        tag = checker.stack[-1]
        raise bad_request(
            f"can't parse entities: Can't find end tag corresponding to start tag \"{tag}\""
        )
    return "".join(checker.parts)


def check_text(text: Any, parse_mode: str | None, caption: bool = False) -> str:
    if caption and not text:
        return ""
    if not isinstance(text, str) or not text:
        raise bad_request("message text is empty")
    plain = plain_text(text, parse_mode)
    if not plain.strip() and not caption:
        raise bad_request("message text is empty")
    if utf16_len(plain) > (MAX_CAPTION if caption else MAX_TEXT):
        raise bad_request("message caption is too long" if caption else "message is too long")
    return plain


async def read_params(request: web.Request) -> JSON:
    """Query, form, multipart or JSON parameters, with non-string values JSON-decoded."""
    raw: JSON = dict(request.query)
    if request.method == "POST" and request.can_read_body:
        if request.content_type == "application/json":
            raw.update(await request.json())
        else:
            for key, field in (await request.post()).items():
                if isinstance(field, web.FileField):
                    raw[key] = {"filename": field.filename, "data": field.file.read()}
                else:
                    raw[key] = field
    params: JSON = {}
    for key, value in raw.items():
        if isinstance(value, str) and key not in STRING_PARAMS:
            try:
                value = json.loads(value)
            except ValueError:
                pass  # "@channel" style chat ids stay strings
        params[key] = value
    return params


@dataclass
class _Queued:
    update: JSON
    forced: bool = False  # an injected redelivery: handed out once whatever the offset says


Handler = Callable[[JSON], Awaitable[Any]]


class FakeTelegram(FakeServer):
    """The Bot API of one bot: inject with ``send_*``/``inject``, read ``calls``/``sent``."""

    def __init__(
        self,
        token: str = "123:ABC",
        bot_username: str = "hermes_bot",
        bot_id: int = 123,
        port: int = 0,
        webhook_retry_delays: tuple[float, ...] = (0.1, 0.3),
    ) -> None:
        super().__init__(port)
        self.token, self.bot_username, self.bot_id = token, bot_username, bot_id
        self.bot_user = make_user(bot_id, bot_username, "Hermes", is_bot=True)
        self.webhook_retry_delays = webhook_retry_delays
        # What the bot did. Appended on the fake's loop only, so reading from any thread is safe.
        self.calls: list[tuple[str, JSON]] = []
        self.errors: list[tuple[str, int, str]] = []  # (method, error_code, description)
        self.sent: list[JSON] = []
        self.edits: list[JSON] = []
        self.deleted: list[tuple[int | str, int]] = []
        self.uploads: list[JSON] = []
        self.chat_actions: list[tuple[int | str, str]] = []
        self.callback_answers: list[JSON] = []
        self.commands: list[JSON] = []
        # file downloads: bytes written to the client, by file_path (a client that hangs up
        # early leaves a smaller count); `download_length` False sends no Content-Length
        self.downloaded: Counter[str] = Counter()
        self.download_length = True
        self.webhook: JSON | None = None
        self.webhook_deliveries: list[JSON] = []
        # Everything below belongs to the fake's loop.
        self._pending: list[_Queued] = []
        self._failures: dict[str, list[ApiError]] = defaultdict(list)
        self._next_update_id = 1000
        self._message_ids: dict[int | str, int] = defaultdict(int)
        self._messages: dict[tuple[int | str, int], JSON] = {}  # every message, by (chat, id)
        self._records: dict[tuple[int | str, int], JSON] = {}  # the `sent` entry of a message
        self._chats: dict[int | str, JSON] = {}
        self._files: dict[str, JSON] = {}
        self._callback_ids: set[str] = set()
        self._call_counts: Counter[str] = Counter()  # `calls` by method, kept for /_fake/stats
        self._stall = self._closing = False
        # getUpdates calls waiting now, by connection; a newer one from another connection
        # ends them with 409 as Telegram does (a client that hung up is no longer polling)
        self._polls: dict[int, tuple[web.Request, asyncio.Event]] = {}
        self._webhook_error: tuple[int, str] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._worker: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        # asyncio primitives bind to a loop on first use, which is the fake's loop.
        self._hook_queue: asyncio.Queue[JSON] = asyncio.Queue()
        self._updates_cond, self._sent_cond = asyncio.Condition(), asyncio.Condition()
        self._methods = {name.lower(): (name, fn) for name, fn in self._handlers().items()}
        routes = self.app.router
        routes.add_route("*", "/bot{token}/{method}", self._api)
        routes.add_get("/file/bot{token}/{path:.+}", self._download)
        routes.add_get("/_fake/sent", self._ctl_sent)
        routes.add_get("/_fake/stats", self._ctl_stats)
        routes.add_post("/_fake/{action}", self._ctl_action)

    def _handlers(self) -> dict[str, Handler]:
        async def true(p: JSON) -> bool:
            return True

        async def get_commands(p: JSON) -> list[JSON]:
            return self.commands

        return {
            "getMe": self._get_me,
            "getUpdates": self._get_updates,
            "setWebhook": self._set_webhook,
            "deleteWebhook": self._delete_webhook,
            "getWebhookInfo": self._get_webhook_info,
            "sendMessage": self._send_message,
            "editMessageText": self._edit_message_text,
            "deleteMessage": self._delete_message,
            "sendChatAction": self._send_chat_action,
            "getFile": self._get_file,
            "sendDocument": lambda p: self._send_upload(p, "document"),
            "sendPhoto": lambda p: self._send_upload(p, "photo"),
            "sendAudio": lambda p: self._send_upload(p, "audio"),
            "sendVoice": lambda p: self._send_upload(p, "voice"),
            "editMessageCaption": self._edit_message_caption,
            "answerCallbackQuery": self._answer_callback_query,
            "setMyCommands": self._set_my_commands,
            "getMyCommands": get_commands,
            "setMessageReaction": true,
        }

    @property
    def api_url(self) -> str:
        return f"{self.url}/bot"

    @property
    def file_url(self) -> str:
        return f"{self.url}/file/bot"

    def start(self) -> FakeTelegram:
        super().start()
        return self

    def __enter__(self) -> FakeTelegram:
        return self.start()

    # -- thread plumbing -------------------------------------------------------------------

    def _on_loop(self, fn: Callable[[], R]) -> R:
        """Run ``fn`` on the fake's loop, which owns all state, and return its result."""
        if self.loop is None or threading.current_thread() is self._thread:
            return fn()

        async def run() -> R:
            return fn()

        return self.call(run)

    def _wake(self, cond: asyncio.Condition) -> None:
        """Wake the waiters of ``cond`` (long polls); must run on the fake's loop."""

        async def notify() -> None:
            async with cond:
                cond.notify_all()

        if self.loop is None:  # not serving yet, so nobody can be waiting
            return
        task = self.loop.create_task(notify())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def on_shutdown(self) -> None:
        # Pending long polls would otherwise hold aiohttp's graceful shutdown for a second.
        self._closing = True
        for cond in (self._updates_cond, self._sent_cond):
            async with cond:
                cond.notify_all()
        if self._worker is not None:
            self._worker.cancel()
        if self._session is not None:
            await self._session.close()

    # -- injecting updates (thread-safe) -----------------------------------------------------

    def send_text(
        self,
        chat_id: int = 555,
        text: str = "hi",
        user_id: int | None = None,
        chat_type: str = "private",
        username: str | None = "alice",
        thread_id: int | None = None,
        reply_to_message_id: int | None = None,
        reply_to_bot: bool = False,
        message_id: int | None = None,
    ) -> JSON:
        """Queue a user's text message; ``user_id`` defaults to the chat id in private chats."""
        opts = dict(user_id=user_id, chat_type=chat_type, username=username, thread_id=thread_id)
        opts.update(reply_to_message_id=reply_to_message_id, reply_to_bot=reply_to_bot)
        return self._on_loop(lambda: self._user_message(chat_id, message_id, opts, text=text))

    def send_command(self, chat_id: int, command: str, **kw: Any) -> JSON:
        """``send_command(5, "/stop@hermes_bot now")``; the bot_command entity comes with it."""
        text = command if command.startswith("/") else f"/{command}"
        if not COMMAND_RE.match(text):
            raise ValueError(f"not a bot command: {command!r}")
        return self.send_text(chat_id, text, **kw)

    def send_photo(
        self,
        chat_id: int = 555,
        file_bytes: bytes = b"\xff\xd8fake-jpeg",
        caption: str | None = None,
        message_id: int | None = None,
        **kw: Any,
    ) -> JSON:
        def run() -> JSON:
            file = self._register_file(file_bytes, "photo.jpg", "photos")
            content = {"photo": _photo_sizes(file), **_caption(caption)}
            return self._user_message(chat_id, message_id, kw, **content)

        return self._on_loop(run)

    def send_document(
        self,
        chat_id: int = 555,
        file_bytes: bytes = b"hello",
        file_name: str = "a.txt",
        caption: str | None = None,
        mime_type: str = "text/plain",
        message_id: int | None = None,
        announced_size: int | None = None,
        **kw: Any,
    ) -> JSON:
        def run() -> JSON:
            file = self._register_file(file_bytes, file_name, "documents", announced_size)
            doc = {**_file_object(file), "file_name": file_name, "mime_type": mime_type}
            return self._user_message(chat_id, message_id, kw, document=doc, **_caption(caption))

        return self._on_loop(run)

    def send_voice(
        self,
        chat_id: int = 555,
        file_bytes: bytes = b"OggS fake-opus",
        duration: int = 1,
        mime_type: str = "audio/ogg",
        message_id: int | None = None,
        **kw: Any,
    ) -> JSON:
        """A voice note: its file on the file host, its length as Telegram announces it."""

        def run() -> JSON:
            file = self._register_file(file_bytes, "voice.ogg", "voice")
            voice = {**_file_object(file), "duration": duration, "mime_type": mime_type}
            return self._user_message(chat_id, message_id, kw, voice=voice)

        return self._on_loop(run)

    def send_callback_query(
        self,
        chat_id: int,
        data: str,
        message_id: int | None = None,
        user_id: int | None = None,
        username: str | None = "alice",
    ) -> JSON:
        """A button press on the bot's message ``message_id`` (default: its latest one here)."""

        def run() -> JSON:
            msg = self._messages.get((chat_id, message_id or 0)) or self._last_bot_message(chat_id)
            if msg is None:
                raise ValueError(f"no bot message in chat {chat_id} to press a button on")
            query_id = f"cq{self._next_update_id}"
            self._callback_ids.add(query_id)
            user = make_user(
                user_id or _default_user_id(chat_id), username, (username or "user").title()
            )
            query = make_callback_query(query_id, user, msg, data)
            return self._push(make_update(self._new_update_id(), "callback_query", query))

        return self._on_loop(run)

    def inject(self, update: JSON) -> JSON:
        """Queue any raw update; ``update_id`` is assigned unless given."""

        def run() -> JSON:
            queued = dict(update)
            if "update_id" not in queued:
                queued = {"update_id": self._new_update_id(), **queued}
            elif isinstance(queued["update_id"], int):
                self._next_update_id = max(self._next_update_id, queued["update_id"] + 1)
            self._remember(queued)
            return self._push(queued)

        return self._on_loop(run)

    def inject_duplicate(self, update: JSON) -> JSON:
        """Deliver ``update`` again with the same update_id, as Telegram does after a timeout."""
        return self._on_loop(lambda: self._push(copy.deepcopy(update), forced=True))

    # -- fault injection and inspection (thread-safe) ---------------------------------------

    def fail_next(
        self,
        method: str,
        status: int = 429,
        retry_after: int | None = 1,
        description: str | None = None,
        times: int = 1,
        raw_body: str | None = None,
    ) -> None:
        """Fail the next ``times`` calls of ``method`` (``raw_body``: a non-JSON reply)."""
        if description is None:
            defaults = {403: "Forbidden: bot was blocked by the user"}
            defaults[429] = f"Too Many Requests: retry after {retry_after}"
            description = defaults.get(status, HTTPStatus(status).phrase)
        wait = retry_after if status == 429 else None
        errors = [ApiError(status, description, wait, raw_body) for _ in range(times)]
        self._on_loop(lambda: self._failures[method.lower()].extend(errors))

    @property
    def stall_get_updates(self) -> bool:
        return self._stall

    @stall_get_updates.setter
    def stall_get_updates(self, value: bool) -> None:
        self._stall = value
        self._on_loop(lambda: self._wake(self._updates_cond))

    @property
    def pending_updates(self) -> list[JSON]:
        """Updates queued for getUpdates and not yet confirmed by an offset."""
        return self._on_loop(lambda: [q.update for q in self._pending])

    def messages_to(self, chat_id: int | str) -> list[JSON]:
        return [m for m in self.sent if m["chat_id"] == chat_id]

    async def wait_sent(
        self, count: int = 1, chat_id: int | str | None = None, timeout: float = 5
    ) -> list[JSON]:
        """From an async test: wait until ``count`` messages were sent (to ``chat_id``)."""

        def ready() -> list[JSON] | None:
            sent = self.sent if chat_id is None else self.messages_to(chat_id)
            return sent if len(sent) >= count else None

        result: list[JSON] = await async_wait_until(ready, timeout)
        return result

    # -- state helpers (fake's loop) ---------------------------------------------------------

    def _new_update_id(self) -> int:
        self._next_update_id += 1
        return self._next_update_id - 1

    def _new_message_id(self, chat_id: int | str, explicit: int | None = None) -> int:
        ids = self._message_ids
        ids[chat_id] = max(ids[chat_id], explicit) if explicit else ids[chat_id] + 1
        return explicit or ids[chat_id]

    def _chat(self, chat_id: int | str, chat: JSON | None = None) -> JSON:
        """The known chat (merged with ``chat``), or a plausible one for an id never seen."""
        if chat is None and chat_id not in self._chats:
            if isinstance(chat_id, str):
                chat = make_chat(chat_id, "channel", username=chat_id.lstrip("@"))
            elif chat_id > 0:
                chat = make_chat(chat_id)
            else:
                chat = make_chat(chat_id, "supergroup" if str(chat_id)[:4] == "-100" else "group")
        self._chats[chat_id] = {**self._chats.get(chat_id, {}), **(chat or {})}
        return self._chats[chat_id]

    def _push(self, update: JSON, forced: bool = False) -> JSON:
        """Queue an update for getUpdates, or hand it to the webhook worker."""
        if self.webhook is not None:
            self._hook_queue.put_nowait(update)
            self._ensure_worker()
        else:
            self._pending.append(_Queued(update, forced))
            self._wake(self._updates_cond)
        return update

    def _user_message(
        self, chat_id: int, message_id: int | None, opts: JSON, **content: Any
    ) -> JSON:
        chat_type, thread_id = opts.get("chat_type", "private"), opts.get("thread_id")
        username = opts.get("username", "alice")
        user_id = opts.get("user_id") or _default_user_id(chat_id if chat_type == "private" else 0)
        chat = make_chat(chat_id, chat_type, is_forum=thread_id is not None)
        if chat_type == "private" and username:
            chat["username"] = username
        chat = self._chat(chat_id, chat)
        user = make_user(user_id, username, (username or "user").title())
        reply_to = self._reply_target(chat, user, opts)
        mid = self._new_message_id(chat_id, message_id)
        msg = make_message(mid, chat, user, thread_id=thread_id, reply_to=reply_to, **content)
        self._messages[(chat_id, mid)] = msg
        return self._push(make_update(self._new_update_id(), "message", msg))

    def _reply_target(self, chat: JSON, user: JSON, opts: JSON) -> JSON | None:
        chat_id, thread_id = chat["id"], opts.get("thread_id")
        if opts.get("reply_to_bot"):
            target = self._last_bot_message(chat_id)
            if target is None:  # the bot "said something earlier" that the test did not script
                target = make_message(self._new_message_id(chat_id), chat, self.bot_user, "...")
                self._messages[(chat_id, target["message_id"])] = target
            return target
        if reply_id := opts.get("reply_to_message_id"):
            return self._messages.get((chat_id, reply_id)) or make_message(reply_id, chat, user, "")
        if thread_id is not None:  # Telegram makes topic messages reply to the topic's root
            created = {"name": f"Topic {thread_id}", "icon_color": 7322096}
            return make_message(
                thread_id, chat, user, thread_id=thread_id, forum_topic_created=created
            )
        return None

    def _last_bot_message(self, chat_id: int | str) -> JSON | None:
        for (chat, _), msg in reversed(self._messages.items()):
            if chat == chat_id and msg.get("from", {}).get("id") == self.bot_id:
                return msg
        return None

    def _remember(self, update: JSON) -> None:
        """Learn chats, messages and callback ids from a raw update, tolerating junk."""
        for payload in update.values():
            if not isinstance(payload, dict):
                continue
            if isinstance(payload.get("id"), str) and "chat_instance" in payload:
                self._callback_ids.add(payload["id"])
            chat, mid = payload.get("chat"), payload.get("message_id")
            if isinstance(chat, dict) and "id" in chat and isinstance(mid, int):
                self._chat(chat["id"], chat)
                self._new_message_id(chat["id"], mid)
                self._messages[(chat["id"], mid)] = payload

    def _register_file(self, data: bytes, name: str, folder: str, size: int | None = None) -> JSON:
        """``size``: the file_size announced (in the message and by getFile), if not the real."""
        n = len(self._files) + 1
        suffix = name[name.rfind(".") :] if "." in name else ""
        announced = len(data) if size is None else size
        file: JSON = {"file_id": f"{folder}-{n}", "file_unique_id": f"u{n}", "file_size": announced}
        file.update(file_path=f"{folder}/file_{n}{suffix}", data=data)
        self._files[file["file_id"]] = file
        return file

    # -- Bot API methods (fake's loop) -------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return ApiError(401, "Unauthorized").response()
        entry = self._methods.get(request.match_info["method"].lower())
        if entry is None:
            return ApiError(404, "Not Found").response()
        name, handler = entry
        try:
            params = await read_params(request)
            self.calls.append((name, params))
            self._call_counts[name] += 1
            if failures := self._failures.get(name.lower()):
                raise failures.pop(0)
            if name == "getUpdates":
                result = await self._poll(request, params)
            else:
                result = await handler(params)
        except (ValueError, TypeError, AttributeError) as exc:  # junk parameters
            return self._api_error(name, bad_request(f"invalid parameters: {exc}"))
        except ApiError as exc:
            return self._api_error(name, exc)
        return web.json_response({"ok": True, "result": result})

    def _api_error(self, method: str, exc: ApiError) -> web.Response:
        self.errors.append((method, exc.status, exc.description))
        return exc.response()

    async def _get_me(self, p: JSON) -> JSON:
        return {**self.bot_user, **BOT_CAPABILITIES}

    async def _poll(self, request: web.Request, p: JSON) -> list[JSON]:
        """getUpdates as Telegram runs it: one consumer at a time."""
        ended = asyncio.Event()
        if self._polls:
            await asyncio.sleep(0.1)  # a client that just hung up: its close is on the way
        for other, other_ended in list(self._polls.values()):
            if other.transport is not None and not other.transport.is_closing():
                other_ended.set()  # a poll of another live connection: terminated, 409
        key = id(request)
        self._polls[key] = (request, ended)
        polling = asyncio.ensure_future(self._get_updates(p))
        waiting = asyncio.ensure_future(ended.wait())
        try:
            await asyncio.wait({polling, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._polls.pop(key, None)
            waiting.cancel()
            if not polling.done():
                polling.cancel()
                await asyncio.gather(polling, return_exceptions=True)
        if polling.cancelled():
            raise ApiError(409, POLL_CONFLICT)
        return polling.result()

    async def _get_updates(self, p: JSON) -> list[JSON]:
        offset, limit = int(p.get("offset") or 0), min(max(int(p.get("limit") or 100), 1), 100)
        allowed = p.get("allowed_updates") or None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(p.get("timeout") or 0)
        self._confirm(offset)
        async with self._updates_cond:
            while not self._closing:
                if self.webhook is not None:
                    raise ApiError(409, WEBHOOK_CONFLICT)
                batch = [] if self._stall else self._take(limit, allowed)
                remaining = None if self._stall else deadline - loop.time()
                if batch or (remaining is not None and remaining <= 0):
                    return batch
                try:
                    await asyncio.wait_for(self._updates_cond.wait(), remaining)
                except TimeoutError:
                    pass
        return []

    def _confirm(self, offset: int) -> None:
        """An offset confirms (drops) every update below it."""
        if offset:
            self._pending = [q for q in self._pending if q.forced or _uid(q.update) >= offset]

    def _take(self, limit: int, allowed: list[str] | None) -> list[JSON]:
        # Sorted, so PTB's "last update_id + 1" offset never skips past a redelivered update.
        self._pending.sort(key=lambda q: _uid(q.update))
        batch = [q for q in self._pending if not allowed or update_kind(q.update) in allowed]
        for queued in batch[:limit]:
            queued.forced = False
        return [q.update for q in batch[:limit]]

    async def _set_webhook(self, p: JSON) -> bool:
        if not p.get("url"):  # Telegram treats an empty url as deleteWebhook
            return await self._delete_webhook(p)
        keys = ("url", "secret_token", "max_connections", "allowed_updates")
        self.webhook = {key: p.get(key) for key in keys}
        if p.get("drop_pending_updates"):
            self._pending.clear()
        pending, self._pending = self._pending, []
        for queued in pending:  # what getUpdates had not delivered now goes to the webhook
            self._push(queued.update)
        self._wake(self._updates_cond)
        return True

    async def _delete_webhook(self, p: JSON) -> bool:
        self.webhook = None
        if p.get("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _get_webhook_info(self, p: JSON) -> JSON:
        hook = self.webhook or {}
        pending = len(self._pending) + self._hook_queue.qsize()
        info = {
            "url": hook.get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": pending,
        }
        if hook:
            info["max_connections"] = hook["max_connections"] or 40
        if self._webhook_error:
            info["last_error_date"], info["last_error_message"] = self._webhook_error
        return info

    async def _send_message(self, p: JSON) -> JSON:
        chat_id = _chat_id(p)
        plain = check_text(p.get("text"), p.get("parse_mode"))
        msg = self._bot_message(chat_id, p, text=plain)
        record = {**dict.fromkeys(RECORD_KEYS), **p, "chat_id": chat_id}
        record.update(message_id=msg["message_id"], edits=0, deleted=False)
        self.sent.append(record)
        self._records[(chat_id, msg["message_id"])] = record
        self._wake(self._sent_cond)
        return msg

    def _bot_message(self, chat_id: int | str, p: JSON, **content: Any) -> JSON:
        reply = p.get("reply_parameters") or {}
        reply_id = reply.get("message_id") or p.get("reply_to_message_id")
        reply_to = self._messages.get((chat_id, reply_id)) if reply_id else None
        allow = reply.get("allow_sending_without_reply") or p.get("allow_sending_without_reply")
        if reply_id and reply_to is None and not allow:
            raise bad_request("message to be replied not found")
        if (p.get("reply_markup") or {}).get("inline_keyboard"):
            content["reply_markup"] = p["reply_markup"]
        msg_id = self._new_message_id(chat_id)
        msg = make_message(
            msg_id,
            self._chat(chat_id),
            self.bot_user,
            thread_id=p.get("message_thread_id"),
            reply_to=reply_to,
            **content,
        )
        self._messages[(chat_id, msg_id)] = msg
        return msg

    async def _edit_message_text(self, p: JSON) -> JSON | bool:
        plain = check_text(p.get("text"), p.get("parse_mode"))
        if p.get("inline_message_id"):
            return True
        key = _message_key(p)
        msg = self._messages.get(key)
        if msg is None:
            raise bad_request("message to edit not found")
        if msg.get("from", {}).get("id") != self.bot_id or "text" not in msg:
            raise bad_request("message can't be edited")
        record = self._records.get(key, {})
        new = {k: p.get(k) for k in ("text", "parse_mode", "reply_markup")}
        if all(record.get(k) == v for k, v in new.items()):
            raise bad_request(NOT_MODIFIED)
        msg.update(text=plain, entities=parse_entities(plain), edit_date=int(time.time()))
        record.update(new, edits=record.get("edits", 0) + 1)
        self.edits.append({"chat_id": key[0], "message_id": key[1], **new})
        return msg

    async def _delete_message(self, p: JSON) -> bool:
        key = _message_key(p)
        if self._messages.pop(key, None) is None:
            raise bad_request("message to delete not found")
        if record := self._records.get(key):
            record["deleted"] = True
        self.deleted.append(key)
        return True

    async def _send_chat_action(self, p: JSON) -> bool:
        chat_id, action = _chat_id(p), p.get("action")
        if action not in CHAT_ACTIONS:
            raise bad_request("wrong parameter action in request")
        self.chat_actions.append((chat_id, action))
        return True

    async def _get_file(self, p: JSON) -> JSON:
        file = self._files.get(str(p.get("file_id")))
        if file is None:
            raise bad_request("invalid file_id")
        return {**_file_object(file), "file_path": file["file_path"]}

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return ApiError(401, "Unauthorized").response()
        path = request.match_info["path"]
        file = next((f for f in self._files.values() if f["file_path"] == path), None)
        if file is None:
            return ApiError(404, "Not Found").response()
        data = memoryview(file["data"])
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if self.download_length:
            resp.content_length = len(data)
        await resp.prepare(request)
        try:
            for start in range(0, len(data), DOWNLOAD_CHUNK):
                await resp.write(data[start : start + DOWNLOAD_CHUNK])
                self.downloaded[path] += len(data[start : start + DOWNLOAD_CHUNK])
            await resp.write_eof()
        except (ConnectionError, RuntimeError):  # the client hung up: count what it was sent
            pass
        return resp

    async def _send_upload(self, p: JSON, kind: str) -> JSON:
        chat_id = _chat_id(p)
        caption = check_text(p.get("caption"), p.get("parse_mode"), caption=True)
        value = p.get(kind)
        if isinstance(value, str) and value.startswith("attach://"):
            value = p.get(value.removeprefix("attach://"))
        if isinstance(value, dict):
            file = self._register_file(value["data"], value.get("filename") or kind, kind + "s")
        elif isinstance(value, str) and value in self._files:
            file = self._files[value]
        elif isinstance(value, str) and value:  # a URL: Telegram would fetch it itself
            file = self._register_file(b"", value, kind + "s")
        else:
            raise bad_request(f"there is no {kind} in the request")
        name = value.get("filename") if isinstance(value, dict) else value
        media: JSON = {"photo": _photo_sizes(file)}
        if kind != "photo":
            media = {kind: {**_file_object(file), "file_name": name}}
        msg = self._bot_message(chat_id, p, **media, **({"caption": caption} if caption else {}))
        record = {**dict.fromkeys(RECORD_KEYS), **p, kind: name, "chat_id": chat_id}
        record.update(message_id=msg["message_id"], file_name=name, data=file["data"])
        self.uploads.append(record)
        return msg

    async def _edit_message_caption(self, p: JSON) -> JSON:
        """A bot's media message gets ``caption``; the same caption is "not modified", as on
        Telegram (an empty one on a message without a caption too)."""
        caption = check_text(p.get("caption"), p.get("parse_mode"), caption=True)
        msg = self._messages.get(_message_key(p))
        if msg is None:
            raise bad_request("message to edit not found")
        if msg.get("from", {}).get("id") != self.bot_id:
            raise bad_request("message can't be edited")
        if not any(k in msg for k in ("photo", "document", "audio", "voice")):
            raise bad_request("there is no caption in the message to edit")
        if (msg.get("caption") or "") == (caption or ""):
            raise bad_request(NOT_MODIFIED)
        msg["caption"] = caption
        self.edits.append({"chat_id": msg["chat"]["id"], "message_id": msg["message_id"]})
        return msg

    async def _answer_callback_query(self, p: JSON) -> bool:
        if p.get("callback_query_id") not in self._callback_ids:
            raise bad_request(QUERY_TOO_OLD)
        self.callback_answers.append(p)
        return True

    async def _set_my_commands(self, p: JSON) -> bool:
        commands = p.get("commands")
        if not isinstance(commands, list):
            raise bad_request('field "commands" must be an Array')
        for command in commands:
            if not COMMAND_NAME_RE.fullmatch(str(command.get("command"))):
                raise bad_request("BOT_COMMAND_INVALID")
        self.commands = commands
        return True

    # -- webhook delivery (fake's loop) ------------------------------------------------------

    def _ensure_worker(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._webhook_worker())

    async def _webhook_worker(self) -> None:
        """Deliver one update at a time, in order, like Telegram with max_connections=1."""
        self._session = self._session or aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10)
        )
        while True:
            update = await self._hook_queue.get()
            if self.webhook is None:  # deleted meanwhile: back to getUpdates
                self._push(update)
            else:
                await self._post_to_webhook(self.webhook, update)

    async def _post_to_webhook(self, hook: JSON, update: JSON) -> None:
        assert self._session is not None
        secret = hook.get("secret_token")
        headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret else {}
        for attempt, delay in enumerate((0.0, *self.webhook_retry_delays), start=1):
            await asyncio.sleep(delay)
            try:
                async with self._session.post(hook["url"], json=update, headers=headers) as resp:
                    status, reason = resp.status, f"{resp.status} {resp.reason}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                status, reason = 0, f"Connection failed: {exc!r}"
            delivery = {"update_id": update.get("update_id"), "url": hook["url"]}
            self.webhook_deliveries.append({**delivery, "status": status, "attempt": attempt})
            if 200 <= status < 300:
                return
            self._webhook_error = (int(time.time()), f"Wrong response from the webhook: {reason}")

    # -- control API for other processes (/_fake/...) ----------------------------------------

    async def _ctl_action(self, request: web.Request) -> web.Response:
        actions: dict[str, Callable[..., Any]] = {
            "send_text": self.send_text,
            "send_command": self.send_command,
            "send_callback_query": self.send_callback_query,
            "inject": self.inject,
            "inject_duplicate": self.inject_duplicate,
            "fail_next": self.fail_next,
        }
        action = actions.get(request.match_info["action"])
        if action is None:
            return web.json_response({"error": "unknown action"}, status=404)
        try:
            return web.json_response(action(**await request.json()))
        except (TypeError, ValueError) as exc:
            return web.json_response({"error": repr(exc)}, status=400)

    async def _ctl_sent(self, request: web.Request) -> web.Response:
        """``?since=N&wait=S``: the sent messages from index N, waiting up to S s for one."""
        since, wait = int(request.query.get("since", 0)), float(request.query.get("wait", 0))
        deadline = asyncio.get_running_loop().time() + wait
        async with self._sent_cond:
            while len(self.sent) <= since and not self._closing:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(self._sent_cond.wait(), remaining)
                except TimeoutError:
                    pass
        return web.json_response(
            {"sent": self.sent[since:], "next": len(self.sent)},
            dumps=lambda o: json.dumps(o, default=repr),
        )

    async def _ctl_stats(self, request: web.Request) -> web.Response:
        # A running count: a poll of stats must not cost O(every call so far) (benchmarks).
        stats = {"calls": self._call_counts, "sent": len(self.sent)}
        stats.update(pending_updates=len(self._pending), uploads=len(self.uploads))
        return web.json_response(stats)


def _uid(update: JSON) -> int:
    uid = update.get("update_id")
    return uid if isinstance(uid, int) else 0


def _default_user_id(chat_id: int | str) -> int:
    """In a private chat the user's id is the chat's; elsewhere "alice" is 555."""
    return chat_id if isinstance(chat_id, int) and chat_id > 0 else 555


def _chat_id(p: JSON) -> int | str:
    chat_id = p.get("chat_id")
    if isinstance(chat_id, str) and chat_id.lstrip("-").isdigit():  # JSON bodies may quote it
        return int(chat_id)
    if chat_id in (None, "") or isinstance(chat_id, bool) or not isinstance(chat_id, int | str):
        raise bad_request("chat_id is empty" if chat_id in (None, "") else "chat not found")
    return chat_id


def _message_key(p: JSON) -> tuple[int | str, int]:
    return _chat_id(p), int(p.get("message_id") or 0)


def _file_object(file: JSON) -> JSON:
    return {k: file[k] for k in ("file_id", "file_unique_id", "file_size")}


def _photo_sizes(file: JSON) -> list[JSON]:
    # One stored file stands in for both sizes; clients download the largest (last) one.
    return [{**_file_object(file), "width": w, "height": h} for w, h in ((90, 68), (800, 600))]


def _caption(caption: str | None) -> JSON:
    if not caption:
        return {}
    entities = parse_entities(caption)
    return {"caption": caption, **({"caption_entities": entities} if entities else {})}


def main(argv: list[str] | None = None) -> int:
    """Serve a fake until SIGTERM/SIGINT; prints ``READY <url>`` once it listens."""
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.telegram")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="123:ABC")
    parser.add_argument("--bot-username", default="hermes_bot")
    parser.add_argument("--bot-id", type=int, default=123)
    args = parser.parse_args(argv)
    fake = FakeTelegram(args.token, args.bot_username, args.bot_id, port=args.port).start()
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    print(f"READY {fake.url}", flush=True)
    while not done.wait(0.2):  # a timed wait lets the signal handler run promptly
        pass
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
