"""What a Slack user sees while a run works: a progress reaction (or assistant-thread status)
and, with `streaming`, a live preview message that the final answer is edited into (its ts is
kept in the inbox, so the replay after a crash finishes it)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Literal

import structlog

from adapters.slack.api import SlackWeb
from hermes_gateway.errors import AdapterError, PermanentAdapterError
from hermes_gateway.events import MessageEvent
from hermes_gateway.text.markup import split_rendered_slack

log = structlog.get_logger("hermes.adapters.slack")
THINKING = "is thinking…"
Remember = Callable[[MessageEvent, str], Awaitable[None]]  # where a preview is, for a replay


class Progress:
    """Shows progress on the message a run answers: added at `processing_start`, removed at the
    run's first end event (`response_sent` or `processing_complete`), so always removed."""

    def __init__(self, mode: Literal["reaction", "status", "none"], reaction: str) -> None:
        self.mode = mode
        self.reaction = reaction
        self._shown: dict[str, tuple[str, str]] = {}  # run_id -> (channel, ts)

    @property
    def active(self) -> int:
        return len(self._shown)

    async def show(self, web: SlackWeb, run_id: str, message: MessageEvent) -> None:
        if self.mode == "none" or not run_id or run_id in self._shown:
            return
        ts = message.message_id
        if self.mode == "status":
            ts = message.thread_id or message.message_id
        try:
            await self._set(web, message.chat_id, ts, on=True)
        except AdapterError as exc:  # progress is a courtesy: never affects the reply
            log.info("slack.progress_failed", mode=self.mode, error=str(exc))
            return
        self._shown[run_id] = (message.chat_id, ts)

    async def clear(self, web: SlackWeb, run_id: str) -> None:
        target = self._shown.pop(run_id, None)
        if target is None:
            return
        try:
            await self._set(web, *target, on=False)
        except AdapterError as exc:
            log.info("slack.progress_clear_failed", mode=self.mode, error=str(exc))

    async def clear_all(self, web: SlackWeb) -> None:
        await asyncio.gather(*(self.clear(web, run_id) for run_id in list(self._shown)))

    async def _set(self, web: SlackWeb, channel: str, ts: str, *, on: bool) -> None:
        if self.mode == "reaction":
            await web.react(channel, ts, self.reaction, add=on)
        else:
            await web.set_status(channel, ts, THINKING if on else "")


class StreamPreview:
    """One run's live preview: the first text posts a message, later text edits it at most every
    ``interval`` seconds; `finish` hands the message over to become the final answer.
    ``adopted``: the message a run cut short by a crash left, continued instead of a new one."""

    def __init__(
        self,
        web: SlackWeb,
        channel: str,
        thread_ts: str | None,
        *,
        limit: int,
        interval: float,
        adopted: str | None = None,
        on_posted: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.web = web
        self.channel = channel
        self.thread_ts = thread_ts
        self.limit = limit
        self.interval = interval
        self.text = ""
        self.ts: str | None = adopted
        self.adopted = adopted is not None
        self.on_posted = on_posted
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"adapter:slack:preview:{channel}")

    def push(self, text: str) -> None:
        self.text += text
        self._changed.set()

    async def finish(self) -> str | None:
        """Stop editing (an edit in flight completes); the preview message's ts, if posted."""
        self._closing.set()
        self._changed.set()
        await asyncio.shield(self._task)
        return self.ts

    def cancel(self) -> None:
        self._closing.set()
        self._task.cancel()

    async def _run(self) -> None:
        while not self._closing.is_set():
            await self._changed.wait()
            if self._closing.is_set():
                return
            self._changed.clear()
            await self._show()
            try:  # throttle: Slack allows about one chat.update per second per message
                await asyncio.wait_for(self._closing.wait(), self.interval)
            except TimeoutError:
                pass

    async def _show(self) -> None:
        parts = split_rendered_slack(self.text, self.limit) if self.text.strip() else []
        if not parts:
            return
        try:
            if self.ts is None:
                self.ts = await self.web.post(self.channel, parts[0], self.thread_ts, attempts=1)
                if self.on_posted is not None:
                    await self.on_posted(self.ts)
            else:
                await self.web.update(self.channel, self.ts, parts[0], attempts=1)
        except PermanentAdapterError as exc:
            if self.adopted:  # the preview from before the crash is gone: post a new one
                self.adopted, self.ts = False, None
                self._changed.set()
                return
            log.info("slack.preview_failed", channel=self.channel, error=str(exc))
        except AdapterError as exc:  # a preview is best effort; the final answer still comes
            log.info("slack.preview_failed", channel=self.channel, error=str(exc))


class Previews:
    """The live previews of runs, by the message they answer, and those a crash left (handed
    over by the replay): the next preview or reply answering that message continues them."""

    def __init__(self, remember: Remember | None) -> None:
        self.remember = remember
        self._live: dict[str, StreamPreview] = {}
        self._orphans: dict[str, str] = {}  # message ts -> the preview's ts

    def open(
        self, web: SlackWeb, event: MessageEvent, limit: int, interval: float
    ) -> StreamPreview:
        preview = StreamPreview(
            web,
            event.chat_id,
            event.thread_id,
            limit=limit,
            interval=interval,
            adopted=self._orphans.pop(event.message_id, None),
            on_posted=partial(self.remember, event) if self.remember is not None else None,
        )
        self._live[event.message_id] = preview
        return preview

    def adopt_ts(self, message_id: str, ts: str) -> None:
        """``ts`` is a preview answering ``message_id`` that a reply has not replaced yet."""
        self._orphans[message_id] = ts

    async def take(self, answers: Iterable[str]) -> str | None:
        """The ts of the preview a reply to ``answers`` becomes (live, or left by a crash)."""
        for message_id in answers:
            preview = self._live.pop(message_id, None)
            if preview is not None:
                return await preview.finish()
            if (ts := self._orphans.pop(message_id, None)) is not None:
                return ts
        return None

    def pop(self, message_id: str) -> StreamPreview | None:
        return self._live.pop(message_id, None)

    def cancel_all(self) -> None:
        for preview in self._live.values():
            preview.cancel()
