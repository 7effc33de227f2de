"""What a Slack user sees while a run works: a progress reaction (or assistant-thread status)
and, with `streaming`, a live preview message that the final answer is edited into."""

from __future__ import annotations

import asyncio
from typing import Literal

import structlog

from adapters.slack_api import SlackWeb
from hermes_gateway.errors import AdapterError
from hermes_gateway.events import MessageEvent
from hermes_gateway.markup import split_rendered_slack

log = structlog.get_logger("hermes.adapters.slack")
THINKING = "is thinking…"


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
    ``interval`` seconds; `finish` hands the message over to become the final answer."""

    def __init__(
        self,
        web: SlackWeb,
        channel: str,
        thread_ts: str | None,
        *,
        limit: int,
        interval: float,
    ) -> None:
        self.web = web
        self.channel = channel
        self.thread_ts = thread_ts
        self.limit = limit
        self.interval = interval
        self.text = ""
        self.ts: str | None = None
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
            else:
                await self.web.update(self.channel, self.ts, parts[0], attempts=1)
        except AdapterError as exc:  # a preview is best effort; the final answer still comes
            log.info("slack.preview_failed", channel=self.channel, error=str(exc))
