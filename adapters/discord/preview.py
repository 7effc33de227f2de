"""The live preview of a streamed answer on Discord: one message, posted at the first text and
edited at most every `interval` seconds; the final answer replaces it (one message in the end).
Where it is goes to the inbox, so the replay after a crash continues it."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog

from hermes_gateway.errors import AdapterError, PermanentAdapterError
from hermes_gateway.events import MessageEvent

if TYPE_CHECKING:
    from adapters.discord.outbound import DiscordOutbox

log = structlog.get_logger("hermes.adapters.discord")

PREVIEW_LIMIT = 1990
INTERRUPTED = "\n\n*(interrupted)*"


def preview_text(text: str) -> str:
    text = text.strip()
    return text if len(text) <= PREVIEW_LIMIT else text[: PREVIEW_LIMIT - 1] + "…"


class Preview:
    """A `StreamSink`: `push` runs on the loop (the runner hands deltas over thread-safely).
    ``adopted``: the message a run cut short by a crash left, continued instead of a new one."""

    def __init__(
        self,
        outbox: DiscordOutbox,
        event: MessageEvent,
        interval: float,
        *,
        adopted: int | None = None,
        on_posted: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.outbox = outbox
        self.key = event.message_id
        self.channel_id = int(event.thread_id or event.chat_id)
        self.interval = interval
        self.text = ""
        self.shown = ""
        self.message_id: int | None = adopted
        self.adopted = adopted is not None
        self.on_posted = on_posted
        self._closed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last = -math.inf

    def push(self, text: str) -> None:
        if self._closed.is_set():
            return
        self.text += text
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"discord:preview:{self.key}")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed.is_set():
            wait = self._last + self.interval - loop.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), wait)
                continue
            shown = preview_text(self.text)
            if shown == self.shown or not shown:
                return  # caught up; the next push starts a new task
            await self._show(shown)
            self._last = loop.time()

    async def _show(self, shown: str) -> None:
        # best effort, one attempt: the final answer is what must arrive
        try:
            if self.message_id is None:
                reply_to = self.outbox.reference(self.key)
                message = await self.outbox.post(self.channel_id, shown, reply_to, retry=False)
                self.message_id = message.id
                if self.on_posted is not None:
                    await self.on_posted(str(message.id))
            else:
                await self.outbox.edit(self.channel_id, self.message_id, shown, retry=False)
        except PermanentAdapterError as exc:
            if self.adopted:  # the preview from before the crash is gone: post a new one
                self.adopted, self.message_id = False, None
                return
            log.debug("discord.preview_failed", error=str(exc), message_id=self.key)
        except AdapterError as exc:
            log.debug("discord.preview_failed", error=str(exc), message_id=self.key)
        self.shown = shown

    async def close(self, *, interrupted: bool = False) -> int | None:
        """Stop previewing (an edit in flight finishes first); returns the preview message id.
        ``interrupted`` marks a preview no final answer will replace."""
        self._closed.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        if interrupted and self.message_id is not None:
            text = preview_text(self.shown or self.text) + INTERRUPTED
            try:
                await self.outbox.edit(self.channel_id, self.message_id, text, retry=False)
            except AdapterError as exc:
                log.debug("discord.preview_failed", error=str(exc), message_id=self.key)
        return self.message_id

    def abandon(self) -> None:
        self._closed.set()
