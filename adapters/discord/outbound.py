"""Replies to Discord: fence-safe parts of at most 2000 characters (the first one references the
user's message), slash-command answers through their interaction, live previews by message
edit, and discord.py's errors translated into the gateway's `AdapterError`s."""

from __future__ import annotations

import io
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import aiohttp
import structlog

import discord
from adapters.discord.interactions import INTERACTION_TTL_S, StoredInteraction
from adapters.discord.render import split_rendered_discord
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
    header,
    retry_after_s,
    with_retry,
)

log = structlog.get_logger("hermes.adapters.discord")
T = TypeVar("T")

LIMIT = 2000
PREVIEW_LIMIT = 1990
INTERRUPTED = "\n\n*(interrupted)*"  # ends a preview no answer will replace
_REMEMBERED = 1024  # interaction id -> the message that answered it, for later references


def preview_text(text: str) -> str:
    """What a live preview shows: the text so far, cut to fit one message."""
    text = text.strip()
    return text if len(text) <= PREVIEW_LIMIT else text[: PREVIEW_LIMIT - 1] + "…"


def translate(exc: BaseException, what: str) -> AdapterError | None:
    """The gateway's error for a discord.py (or network) failure; None if it is neither."""
    if isinstance(exc, AdapterError):
        return exc
    if isinstance(exc, discord.RateLimited):
        return RateLimitedError(f"discord {what}: rate limited", exc.retry_after)
    if isinstance(exc, discord.LoginFailure):
        return AdapterAuthError(f"discord {what}: the bot token was rejected")
    if isinstance(exc, discord.HTTPException):
        detail = f"discord {what}: HTTP {exc.status} (code {exc.code}) {exc.text}".strip()
        if exc.status == 401:
            return AdapterAuthError(detail)
        if exc.status == 429:  # only when discord.py gave up waiting itself
            return RateLimitedError(detail, _retry_after_of(exc))
        if exc.status >= 500:
            return TransientAdapterError(detail)
        return PermanentAdapterError(detail)
    if isinstance(exc, aiohttp.ClientError | OSError | TimeoutError | discord.ConnectionClosed):
        return TransientAdapterError(f"discord {what}: {exc!r}")
    return None


async def guarded(call: Callable[[], Awaitable[T]], what: str) -> T:
    """Run one discord.py call, raising the gateway's errors instead of the SDK's."""
    try:
        return await call()
    except Exception as exc:
        err = translate(exc, what)
        if err is None or err is exc:
            raise
        raise err from exc


def snowflake(value: str | None, what: str) -> int:
    try:
        return int(value or "")
    except ValueError:
        raise PermanentAdapterError(f"not a Discord {what} id: {value!r}") from None


@dataclass(frozen=True, slots=True)
class _Deferred:
    followup: Callable[[], discord.Webhook]  # the live interaction's, or rebuilt after a restart
    session_key: str
    expires: float  # monotonic


class ChannelReply:
    """One reply's primitives in its channel (a `ReplyWire`): the first part references the
    message answered, and every part is posted with its key as its nonce, so Discord itself
    answers a second post of a part (a retry, a part in doubt after a crash) with the first."""

    def __init__(self, outbox: DiscordOutbox, channel_id: int, out: OutboundMessage) -> None:
        self.outbox = outbox
        self.channel_id = channel_id
        self.out = out

    def after(self) -> str:
        return ""  # the nonce settles a part in doubt: no reference to look after

    async def post(self, index: int, part: str, key: str | None) -> None:
        reply_to = self.outbox.reference(self.out.reply_to) if index == 0 else None
        await self.outbox.post(self.channel_id, part, reply_to, nonce=key)

    async def edit(self, ref: int, part: str) -> None:
        await self.outbox.edit(self.channel_id, ref, part)

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        return False  # posted again with the same nonce, which Discord does not double

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        reply_to = self.outbox.reference(self.out.reply_to) if index == 0 else None
        await self.outbox.attach(self.channel_id, upload, reply_to, nonce=key)

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        return False  # the attachment's message carries the nonce too


class FollowUp:
    """A slash command's answer, part by part through its interaction's follow-up webhook (a
    `ReplyWire` with no preview and no lookup: the "thinking..." message is the preview)."""

    def __init__(
        self,
        send: Callable[[str], Awaitable[discord.WebhookMessage]],
        answered: Callable[[int], None],
    ) -> None:
        self.send = send  # one follow-up message, retried
        self.answered = answered  # told the message that answered the interaction
        self.delivered = 0

    def after(self) -> str:
        return ""

    async def post(self, index: int, part: str, key: str | None) -> None:
        message = await self.send(part)
        self.delivered += 1
        if index == 0:
            self.answered(message.id)

    async def edit(self, ref: int, part: str) -> None:
        raise PermanentAdapterError("a follow-up takes over no preview")

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        return False


class DiscordOutbox:
    """Everything the adapter sends; `client` returns the logged-in client or raises
    `TransientAdapterError` while there is none (a restart in progress)."""

    retry_attempts = 3  # discord.py itself retries 429s and most 5xx before we see them
    retry_base_delay = 0.5
    edit_interval = 1.0  # seconds between preview edits (Discord allows ~5 edits per 5 s)

    def __init__(
        self, client: Callable[[], discord.Client], remember: Remember | None = None
    ) -> None:
        self._client = client
        self.remember = remember
        self._deferred: dict[str, _Deferred] = {}
        self._answered: OrderedDict[str, int] = OrderedDict()
        self.previews: PreviewBook[str, int] = PreviewBook("discord", remember)
        self.replier = Replier(self.previews)
        # messages being admitted: a refusal answers a message plainly in its channel and a
        # slash command privately (its interaction), as neither was acknowledged yet
        self._held: dict[str, discord.Interaction[Any] | None] = {}

    # -- single calls -------------------------------------------------------------------------

    async def post(
        self,
        channel_id: int,
        text: str,
        reply_to: int | None = None,
        *,
        retry: bool = True,
        nonce: str | None = None,
    ) -> discord.Message:
        """Post one message. With a ``nonce`` (discord.py sends it with ``enforce_nonce``), a
        second post of it within Discord's dedupe window returns the first message instead of
        creating another: a retry or a replay after a crash cannot double it."""

        async def call() -> discord.Message:
            channel = self._client().get_partial_messageable(channel_id)
            extra: dict[str, Any] = {} if nonce is None else {"nonce": nonce}
            if reply_to is None:
                return await channel.send(text, **extra)
            ref = discord.MessageReference(
                message_id=reply_to, channel_id=channel_id, fail_if_not_exists=False
            )
            return await channel.send(text, reference=ref, **extra)

        return await self._call(call, "send", retry)

    async def attach(
        self, channel_id: int, upload: Upload, reply_to: int | None, *, nonce: str | None
    ) -> discord.Message:
        """Post one file as a message attachment, its caption as the message's text, with the
        part's nonce: Discord does not double it either."""

        async def call() -> discord.Message:
            channel = self._client().get_partial_messageable(channel_id)
            file = discord.File(io.BytesIO(upload.data), filename=upload.file.name)
            extra: dict[str, Any] = {} if nonce is None else {"nonce": nonce}
            if reply_to is not None:
                extra["reference"] = discord.MessageReference(
                    message_id=reply_to, channel_id=channel_id, fail_if_not_exists=False
                )
            return await channel.send(upload.file.caption or None, file=file, **extra)

        return await self._call(call, "send_file", True)

    async def edit(
        self, channel_id: int, message_id: int, text: str, *, retry: bool = True
    ) -> None:
        async def call() -> None:
            channel = self._client().get_partial_messageable(channel_id)
            await channel.get_partial_message(message_id).edit(content=text)

        await self._call(call, "edit", retry)

    async def typing(self, channel_id: int) -> None:
        async def call() -> None:
            await self._client().get_partial_messageable(channel_id).typing()

        await guarded(call, "typing")

    async def _call(self, call: Callable[[], Awaitable[T]], what: str, retry: bool) -> T:
        if not retry:
            return await guarded(call, what)
        return await with_retry(
            lambda: guarded(call, what),
            what=f"discord.{what}",
            attempts=self.retry_attempts,
            base_delay=self.retry_base_delay,
        )

    def reference(self, message_id: str | None) -> int | None:
        """The message a reply should quote: the user's message, or for a slash command the
        message that answered it (an interaction id is not a message)."""
        if message_id is None:
            return None
        if message_id in self._answered:
            return self._answered[message_id]
        return int(message_id) if message_id.isdigit() else None

    # -- admission ----------------------------------------------------------------------------

    def hold(self, message_id: str, interaction: discord.Interaction[Any] | None = None) -> None:
        self._held[message_id] = interaction

    def release(self, message_id: str) -> None:
        self._held.pop(message_id, None)

    async def _refuse(self, out: OutboundMessage, channel_id: int) -> bool:
        """Send the access rules' answer to a held message; False when ``out`` is not one."""
        if out.kind != "notice" or not out.answers or out.answers[0] not in self._held:
            return False
        interaction = self._held.pop(out.answers[0])
        if interaction is None:
            await self.post(channel_id, out.text)
        else:
            await guarded(
                lambda: interaction.response.send_message(out.text, ephemeral=True), "refuse"
            )
        return True

    # -- slash commands -----------------------------------------------------------------------

    async def defer(self, interaction: discord.Interaction[Any], session_key: str) -> bool:
        """Acknowledge within Discord's 3 s ("thinking..."); the answer follows up. False when
        Discord refused: the answer then goes to the channel."""
        self._expire()
        try:
            await guarded(lambda: interaction.response.defer(thinking=True), "defer")
        except AdapterError as exc:
            log.warning("discord.defer_failed", error=str(exc), interaction_id=interaction.id)
            return False
        expires = time.monotonic() + INTERACTION_TTL_S
        deferred = _Deferred(lambda: interaction.followup, session_key, expires)
        self._deferred[str(interaction.id)] = deferred
        return True

    def resume(self, event: MessageEvent) -> None:
        """After a restart: answer ``event`` through the interaction its `reply_context` kept,
        while the token lives (past that, the answer goes to the channel)."""
        stored = StoredInteraction.decode(event.reply_context)
        if stored is None:
            return
        left = stored.remaining()
        if left <= 0:
            log.info("discord.interaction_expired", interaction_id=event.message_id)
            return
        followup = partial(self._rebuilt_followup, stored)
        expires = time.monotonic() + left
        self._deferred[event.message_id] = _Deferred(followup, event.session_key, expires)

    def _rebuilt_followup(self, stored: StoredInteraction) -> discord.Webhook:
        return stored.webhook(self._client())

    def _expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, d in self._deferred.items() if d.expires <= now]:
            del self._deferred[key]

    def _take_deferred(self, out: OutboundMessage) -> tuple[str, _Deferred] | None:
        self._expire()
        for message_id in out.answers:
            if (found := self._deferred.pop(message_id, None)) is not None:
                return message_id, found
        if not out.answers:  # an acknowledgement (/queue, /steer) for an open command
            for key, found in self._deferred.items():
                if found.session_key == out.session_key:
                    del self._deferred[key]
                    return key, found
        return None

    async def _via_interaction(
        self, key: str, deferred: _Deferred, out: OutboundMessage, parts: list[str]
    ) -> bool:
        async def send(part: str) -> discord.WebhookMessage:
            async def call() -> discord.WebhookMessage:
                try:
                    return await deferred.followup().send(part, wait=True)
                except discord.HTTPException as exc:
                    if exc.status == 401:  # the interaction's token, not the bot's: it expired
                        raise PermanentAdapterError(f"discord followup: {exc.text}") from exc
                    raise

            return await self._call(call, "followup", True)

        wire = FollowUp(send, partial(self._answer, key))
        try:
            await self.replier.send(out, parts, wire)
        except PermanentAdapterError as exc:
            if wire.delivered or out.skip_parts:
                raise
            log.warning("discord.followup_failed", error=str(exc), interaction_id=key)
            return False
        except AdapterError:
            self._deferred[key] = deferred  # the redelivery answers through it too
            raise
        return True

    def _answer(self, key: str, message_id: int) -> None:
        self._answered[key] = message_id
        while len(self._answered) > _REMEMBERED:
            self._answered.popitem(last=False)

    # -- replies ------------------------------------------------------------------------------

    async def send(self, out: OutboundMessage) -> None:
        parts = split_rendered_discord(out.text, LIMIT) or ["…"]
        channel_id = snowflake(out.thread_id or out.chat_id, "channel")
        if await self._refuse(out, channel_id):
            return
        popped = [(m, p) for m in out.answers if (p := self.previews.pop(m)) is not None]
        orphans = [o for m in out.answers if (o := self.previews.pop_orphan(m)) is not None]
        deferred = self._take_deferred(out)
        if deferred is not None:
            await _interrupt([p for _, p in popped])
            if await self._via_interaction(*deferred, out, parts):
                return
            popped = []
        primary = popped[0][1] if popped and popped[0][0] == out.reply_to else None
        await _interrupt([p for _, p in popped if p is not primary])
        shown = await primary.finish() if primary is not None else None
        if shown is None and orphans and deferred is None:
            shown = orphans[0]  # a replay finishes the preview its crashed run left
        preview = PreviewRef(out.answers[0], shown) if shown is not None else None
        await self.replier.send(out, parts, ChannelReply(self, channel_id, out), preview)

    def adopt(self, event: MessageEvent, ref: str) -> None:
        if ref.isdigit():
            self.previews.adopt(event.message_id, int(ref))

    def preview(self, event: MessageEvent) -> LivePreview[int] | None:
        """A live preview for the run answering ``event`` (not for slash commands, whose
        "thinking..." message is the preview); it continues a preview a crash cut short."""
        if event.message_id in self._deferred:
            return None
        channel_id = int(event.thread_id or event.chat_id)

        async def post(text: str) -> int:
            reply_to = self.reference(event.message_id)
            return (await self.post(channel_id, text, reply_to, retry=False)).id

        async def edit(message_id: int, text: str) -> None:
            await self.edit(channel_id, message_id, text, retry=False)

        wire = PreviewWire("discord", post, edit, preview_text, self.edit_interval)
        return self.previews.open(event.message_id, event, wire)

    async def close(self) -> None:
        """Mark unfinished previews as interrupted; forget open interactions."""
        self._deferred.clear()
        await self.previews.finish_all(INTERRUPTED)


async def _interrupt(previews: list[LivePreview[int]]) -> None:
    """Finish previews no answer will replace, marked as interrupted."""
    for preview in previews:
        await preview.finish(INTERRUPTED)


def _retry_after_of(exc: discord.HTTPException) -> float:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    return retry_after_s(header(headers))
