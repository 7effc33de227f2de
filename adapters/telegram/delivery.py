"""Telegram delivery: Markdown -> HTML parts of at most 4096 UTF-16 units, a plain-text retry
when Telegram cannot parse the HTML, bounded retries per part, and the live preview by edits
(kept in the inbox, so a replay after a crash finishes it)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import structlog

from adapters.shims.ptb import retry_after_s
from adapters.telegram.http import AiohttpRequest
from hermes_gateway.core.parts import send_parts
from hermes_gateway.errors import (
    AdapterAuthError,
    AdapterError,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from hermes_gateway.events import MessageEvent, OutboundMessage
from hermes_gateway.seam.retry import with_retry
from hermes_gateway.text.markup import split_rendered_telegram, telegram_html_to_plain
from telegram import Bot
from telegram.constants import ParseMode
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Conflict,
    EndPointNotFound,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)

log = structlog.get_logger("hermes.adapters.telegram")
T = TypeVar("T")
Op = Callable[[str, str | None], Awaitable[T]]  # (text, parse_mode) -> result
Remember = Callable[[MessageEvent, str], Awaitable[None]]  # where a preview is, for a replay

LIMIT = 4096  # UTF-16 units per message, as Telegram counts them
PARSE_ERROR = "can't parse entities"  # PTB capitalizes Telegram's text: compare lower-cased
NOT_MODIFIED = "message is not modified"


def translate(exc: TelegramError) -> AdapterError:
    """A PTB error as one of ours (the retry helper and `Delivery` act on the class)."""
    if isinstance(exc, RetryAfter):
        return RateLimitedError(str(exc), retry_after_s(exc))
    if isinstance(exc, InvalidToken):
        return AdapterAuthError(f"Telegram rejected the bot token: {exc}")
    if isinstance(exc, BadRequest | Forbidden | ChatMigrated | Conflict | EndPointNotFound):
        return PermanentAdapterError(f"{type(exc).__name__}: {exc}")
    # NetworkError (TimedOut, 5xx, resets) and anything new: worth a bounded retry
    return TransientAdapterError(f"{type(exc).__name__}: {exc}")


async def call(fn: Callable[[], Awaitable[T]]) -> T:
    """Run one Bot API call, translating its errors."""
    try:
        return await fn()
    except TelegramError as exc:
        raise translate(exc) from exc


def chat_ref(chat_id: str) -> int | str:
    """Telegram chat ids are integers; ``@channelname`` stays a string."""
    return int(chat_id) if chat_id.lstrip("-").isdigit() else chat_id


def render(markdown: str) -> list[str]:
    """The reply as HTML parts, each within the limit, code fences closed and reopened."""
    return split_rendered_telegram(markdown, LIMIT) or ["(empty reply)"]


class Sender:
    """Sends and edits messages through one bot, with the plain-text fallback.

    Sends and edits go through the bot's transport (``request``) as plain Bot API calls:
    the gateway reads only the new message's id, and PTB's `send_message` would build a
    `Message` and the message it quotes from every answer (see `AiohttpRequest.call`).
    """

    def __init__(self, bot: Bot, request: AiohttpRequest) -> None:
        self.bot = bot
        self.request = request

    async def _call(self, method: str, **fields: Any) -> Any:
        return await self.request.call(f"{self.bot.base_url}/{method}", fields)

    async def send(
        self,
        chat_id: str,
        html: str,
        *,
        thread_id: str | None = None,
        reply_to: str | None = None,
        attempts: int = 5,
    ) -> int:
        """Send one part; returns its message id."""
        reply = None
        if reply_to and reply_to.isdigit():
            reply = {"message_id": int(reply_to), "allow_sending_without_reply": True}
        thread = int(thread_id) if thread_id and thread_id.isdigit() else None

        async def op(text: str, parse_mode: str | None) -> Any:
            return await self._call(
                "sendMessage",
                chat_id=chat_ref(chat_id),
                text=text,
                parse_mode=parse_mode,
                message_thread_id=thread,
                reply_parameters=reply,
            )

        sent = await self._deliver("telegram.sendMessage", html, op, attempts)
        message_id = sent.get("message_id") if isinstance(sent, dict) else None
        if not isinstance(message_id, int):
            # it was sent: a retry would post it twice
            raise PermanentAdapterError(f"sendMessage answered without a message id: {sent!r:.200}")
        return message_id

    async def edit(self, chat_id: str, message_id: int, html: str, *, attempts: int = 5) -> None:
        """Replace a message's text; "not modified" (it already says that) is success."""

        async def op(text: str, parse_mode: str | None) -> None:
            try:
                await self._call(
                    "editMessageText",
                    chat_id=chat_ref(chat_id),
                    message_id=message_id,
                    text=text,
                    parse_mode=parse_mode,
                )
            except BadRequest as exc:
                if NOT_MODIFIED not in str(exc).lower():
                    raise

        await self._deliver("telegram.editMessageText", html, op, attempts)

    async def delete(self, chat_id: str, message_id: int) -> None:
        try:
            await call(lambda: self.bot.delete_message(chat_ref(chat_id), message_id))
        except AdapterError as exc:
            log.debug("telegram.delete_failed", chat_id=chat_id, error=str(exc))

    async def _deliver(self, what: str, html: str, op: Op[T], attempts: int) -> T:
        plain = False

        async def attempt() -> T:
            nonlocal plain
            if not plain:
                try:
                    return await op(html, ParseMode.HTML)
                except BadRequest as exc:
                    if PARSE_ERROR not in str(exc).lower():
                        raise translate(exc) from exc
                    log.warning("telegram.html_rejected", what=what, error=str(exc))
                    plain = True
                except TelegramError as exc:
                    raise translate(exc) from exc
            return await call(lambda: op(telegram_html_to_plain(html), None))

        return await with_retry(attempt, what=what, attempts=attempts)


class PreviewSink:
    """The answer shown while the model writes it: one message, edited at most once per
    ``interval``; `finish` hands its id to `send`, which turns it into the final first part.
    ``adopted``: the message a run cut short by a crash left, continued instead of a new one."""

    def __init__(
        self,
        sender: Sender,
        chat_id: str,
        thread_id: str | None,
        reply_to: str,
        interval: float = 1.0,
        *,
        adopted: int | None = None,
        on_posted: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.sender = sender
        self.chat_id, self.thread_id, self.reply_to = chat_id, thread_id, reply_to
        self.interval = interval
        self.created = time.monotonic()
        self.message_id: int | None = adopted
        self.adopted = adopted is not None
        self.on_posted = on_posted
        self._text = ""
        self._shown = ""
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def push(self, text: str) -> None:
        if self._closed.is_set() or not text:
            return
        self._text += text
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"adapter:telegram:preview:{self.chat_id}"
            )

    def close(self) -> None:
        """No more edits (one in flight completes); the preview keeps what it shows."""
        self._closed.set()
        self._wake.set()

    async def finish(self) -> int | None:
        """`close`, then wait for an edit in flight; the preview's message id, if any."""
        self.close()
        if self._task is not None:
            await asyncio.shield(self._task)
        return self.message_id

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            if self._closed.is_set():
                return
            self._wake.clear()
            pause = await self._show()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), max(pause, self.interval))

    async def _show(self) -> float:
        """Show the text so far; returns how long to wait before the next edit."""
        parts = split_rendered_telegram(self._text, LIMIT)
        html = parts[0] if parts else ""
        if not html or html == self._shown:
            return 0.0
        try:
            if self.message_id is None:
                self.message_id = await self.sender.send(
                    self.chat_id, html, thread_id=self.thread_id, reply_to=self.reply_to, attempts=1
                )
                if self.on_posted is not None:
                    await self.on_posted(str(self.message_id))
            else:
                await self.sender.edit(self.chat_id, self.message_id, html, attempts=1)
            self._shown = html
        except RateLimitedError as exc:  # a preview is never worth a flood ban: skip edits
            log.info("telegram.preview_throttled", retry_after=exc.retry_after)
            return exc.retry_after
        except PermanentAdapterError as exc:  # blocked, or the user deleted the preview
            if self.adopted:  # the preview from before the crash is gone: post a new one
                self.adopted, self.message_id = False, None
                self._wake.set()
                return 0.0
            log.info("telegram.preview_stopped", error=str(exc))
            self._closed.set()
        except AdapterError as exc:
            log.debug("telegram.preview_failed", error=str(exc))
        return 0.0


class Outbox:
    """Replies through one bot: live previews registered by `preview`, settled by `send`."""

    def __init__(
        self, sender: Sender, edit_interval: float = 1.0, remember: Remember | None = None
    ) -> None:
        self.sender = sender
        self.edit_interval = edit_interval
        self.remember = remember
        self._previews: dict[tuple[str, str], PreviewSink] = {}
        self._orphans: dict[tuple[str, str], int] = {}  # previews a crash left, by answer

    def adopt(self, event: MessageEvent, ref: str) -> None:
        if ref.isdigit():
            self._orphans[(event.chat_id, event.message_id)] = int(ref)

    def preview(self, event: MessageEvent, max_age: float = 900.0) -> PreviewSink:
        key = (event.chat_id, event.message_id)
        for old_key, old in list(self._previews.items()):
            if old_key == key or old.created < time.monotonic() - max_age:  # never answered
                del self._previews[old_key]
                old.close()
        sink = PreviewSink(
            self.sender,
            event.chat_id,
            event.thread_id,
            event.message_id,
            self.edit_interval,
            adopted=self._orphans.pop(key, None),
            on_posted=partial(self.remember, event) if self.remember is not None else None,
        )
        self._previews[key] = sink
        return sink

    async def send(self, message: OutboundMessage) -> None:
        """Each part once, the first replying to ``answers[0]`` in the same topic. A reply
        takes over the live preview of its answer as its first part (never a duplicate); a
        notice (`/stop`, an error) leaves a preview showing what was written so far."""
        preview = await self._take_preview(message)

        async def one(index: int, html: str) -> None:
            if index == 0 and preview is not None:
                try:
                    await self.sender.edit(message.chat_id, preview, html)
                    return
                except PermanentAdapterError as exc:  # the preview is gone: send it anew
                    log.info("telegram.preview_lost", error=str(exc))
                except AdapterError:  # the redelivery edits it, rather than leave it half-written
                    self._orphans[(message.chat_id, message.answers[0])] = preview
                    raise
            await self.sender.send(
                message.chat_id,
                html,
                thread_id=message.thread_id,
                reply_to=message.reply_to if index == 0 else None,
            )

        await send_parts(message, render(message.text), one)

    async def _take_preview(self, message: OutboundMessage) -> int | None:
        """The id of the preview a reply takes over; the other previews it settles go."""
        found: int | None = None
        for answered in message.answers:
            key = (message.chat_id, answered)
            preview = self._previews.pop(key, None)
            if preview is not None:
                message_id = await preview.finish()
            else:
                message_id = self._orphans.pop(key, None)
            if message_id is None or message.kind != "reply":
                continue
            if found is None:
                found = message_id
            else:
                await self.sender.delete(message.chat_id, message_id)
        return found

    async def close(self) -> None:
        previews, self._previews = list(self._previews.values()), {}
        await asyncio.gather(*(p.finish() for p in previews))
