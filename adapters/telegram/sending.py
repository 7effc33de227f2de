"""Telegram delivery: Markdown -> HTML parts of at most 4096 UTF-16 units, a plain-text retry
when Telegram cannot parse the HTML, bounded retries per part, and the live preview by edits
(kept in the inbox, so a replay after a crash finishes it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from adapters.shims.ptb import retry_after_s
from adapters.telegram.http import AiohttpRequest
from adapters.telegram.render import split_rendered_telegram, telegram_html_to_plain
from adapters.telegram.sent_check import NOT_MODIFIED, PARSE_ERROR, SeenIds, find_sent
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    LivePreview,
    MessageEvent,
    OutboundMessage,
    PermanentAdapterError,
    PreviewBook,
    PreviewRef,
    PreviewWire,
    RateLimitedError,
    Remember,
    Replier,
    TransientAdapterError,
    Upload,
    with_retry,
)
from telegram import Bot, Message, ReplyParameters
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

Key = tuple[str, str]  # what a preview answers: (chat id, message id)
LIMIT = 4096  # UTF-16 units per message, as Telegram counts them
PHOTO_BYTES = 10 * 1024 * 1024  # larger images go as documents


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


def first_part(markdown: str) -> str:
    """What a live preview shows: the first part of the text so far, as HTML."""
    parts = split_rendered_telegram(markdown, LIMIT)
    return parts[0] if parts else ""


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

    async def edit_once(
        self, chat_id: str, message_id: int, text: str, parse_mode: str | None
    ) -> None:
        """One editMessageText, PTB's errors as they are (a probe reads Telegram's answer)."""
        await self._call(
            "editMessageText",
            chat_id=chat_ref(chat_id),
            message_id=message_id,
            text=text,
            parse_mode=parse_mode,
        )

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

    async def caption_once(self, chat_id: str, message_id: int, caption: str) -> None:
        """One editMessageCaption, PTB's errors as they are (a file part's probe)."""
        await self._call(
            "editMessageCaption", chat_id=chat_ref(chat_id), message_id=message_id, caption=caption
        )

    async def upload(
        self, chat_id: str, upload: Upload, *, thread_id: str | None, reply_to: str | None
    ) -> int:
        """Send one file the way Telegram shows its kind best; returns its message id. The
        caption goes as plain text (it is what a probe after a crash compares)."""
        file, bot = upload.file, self.bot
        methods: dict[str, Callable[..., Awaitable[Message]]] = {
            "image": bot.send_photo if len(upload.data) <= PHOTO_BYTES else bot.send_document,
            "audio": bot.send_audio,
            "voice": bot.send_voice,
        }
        method = methods.get(file.kind, bot.send_document)
        field = method.__name__.removeprefix("send_")
        reply = None
        if reply_to and reply_to.isdigit():
            reply = ReplyParameters(int(reply_to), allow_sending_without_reply=True)
        thread = int(thread_id) if thread_id and thread_id.isdigit() else None
        fields: dict[str, Any] = {field: upload.data, "filename": file.name}
        fields.update(caption=file.caption or None, message_thread_id=thread)

        async def attempt() -> int:
            sent = await call(lambda: method(chat_ref(chat_id), reply_parameters=reply, **fields))
            return int(sent.message_id)

        return await with_retry(attempt, what=f"telegram.{method.__name__}", attempts=5)

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


class ChatReply:
    """One reply's primitives in its chat (a `ReplyWire`): the first part replies to the
    message answered, every id sent is noted, and a part in doubt is probed for."""

    def __init__(
        self, sender: Sender, known: SeenIds, message: OutboundMessage, limit: int
    ) -> None:
        self.sender = sender
        self.known = known
        self.message = message
        self.limit = limit  # message ids probed for a part in doubt

    def after(self) -> str:
        return self.known.newest(self.message.chat_id, self.message.reply_to)

    async def post(self, index: int, part: str, key: str | None) -> None:
        message = self.message
        sent = await self.sender.send(
            message.chat_id,
            part,
            thread_id=message.thread_id,
            reply_to=message.reply_to if index == 0 else None,
        )
        self.known.note(message.chat_id, sent)

    async def edit(self, ref: int, part: str) -> None:
        await self.sender.edit(self.message.chat_id, ref, part)

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        chat = self.message.chat_id
        return await find_sent(self.sender, self.known, chat, part, after, self.limit) is not None

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        message = self.message
        reply_to = message.reply_to if index == 0 else None
        thread = message.thread_id
        sent = await self.sender.upload(
            message.chat_id, upload, thread_id=thread, reply_to=reply_to
        )
        self.known.note(message.chat_id, sent)

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        """Probed by caption: a file without one matches any captionless message of this bot
        in the window, so it is found rather than doubled (docs/media.md says so)."""
        chat, caption = self.message.chat_id, upload.file.caption
        found = await find_sent(self.sender, self.known, chat, caption, after, self.limit, True)
        return found is not None


class Outbox:
    """Replies through one bot: live previews registered by `preview`, settled by `send`."""

    probe_limit = 10  # message ids tried, after a crash, to find a part that may be out

    def __init__(
        self, sender: Sender, edit_interval: float = 1.0, remember: Remember | None = None
    ) -> None:
        self.sender = sender
        self.known = SeenIds()
        self.edit_interval = edit_interval
        self.previews: PreviewBook[Key, int] = PreviewBook("telegram", remember)
        self.replier = Replier(self.previews)

    def adopt(self, event: MessageEvent, ref: str) -> None:
        if ref.isdigit():
            self.previews.adopt((event.chat_id, event.message_id), int(ref))

    def preview(self, event: MessageEvent) -> LivePreview[int]:
        async def post(html: str) -> int:
            sent = await self.sender.send(
                event.chat_id,
                html,
                thread_id=event.thread_id,
                reply_to=event.message_id,
                attempts=1,
            )
            self.known.note(event.chat_id, sent)
            return sent

        async def edit(message_id: int, html: str) -> None:
            await self.sender.edit(event.chat_id, message_id, html, attempts=1)

        wire = PreviewWire("telegram", post, edit, first_part, self.edit_interval)
        return self.previews.open((event.chat_id, event.message_id), event, wire)

    async def send(self, message: OutboundMessage) -> None:
        """Each part once, the first replying to ``answers[0]`` in the same topic. A reply
        takes over the live preview of its answer as its first part (never a duplicate); a
        notice (`/stop`, an error) leaves a preview showing what was written so far."""
        preview = await self._take_preview(message)
        wire = ChatReply(self.sender, self.known, message, self.probe_limit)
        await self.replier.send(message, render(message.text), wire, preview)

    async def _take_preview(self, message: OutboundMessage) -> PreviewRef[Key, int] | None:
        """The preview a reply takes over; the other previews it settles go."""
        found: PreviewRef[Key, int] | None = None
        for answered in message.answers:
            message_id = await self.previews.take((message.chat_id, answered))
            if message_id is None or message.kind != "reply":
                continue
            if found is None:
                found = PreviewRef((message.chat_id, message.answers[0]), message_id)
            else:
                await self.sender.delete(message.chat_id, message_id)
        return found

    async def close(self) -> None:
        await self.previews.finish_all()
