"""What a Slack user sees while a run works: a progress reaction (or assistant-thread status),
and with `streaming` a live preview (`slack_preview`) that the final answer is edited into."""

from __future__ import annotations

import asyncio
from typing import Literal

import structlog

from adapters.slack.api import SlackWeb
from adapters.slack.render import split_rendered_slack
from hermes_gateway.platforms import AdapterError, MessageEvent, PreviewWire

log = structlog.get_logger("hermes.adapters.slack")
THINKING = "is thinking…"


def slack_preview(
    web: SlackWeb, event: MessageEvent, limit: int, interval: float
) -> PreviewWire[str]:
    """The live preview's wire: posted into the event's thread, edited in place by its ts."""

    async def post(text: str) -> str:
        return await web.post(event.chat_id, text, event.thread_id, attempts=1)

    async def edit(ts: str, text: str) -> None:
        await web.update(event.chat_id, ts, text, attempts=1)

    def first_part(markdown: str) -> str:
        parts = split_rendered_slack(markdown, limit) if markdown.strip() else []
        return parts[0] if parts else ""

    return PreviewWire("slack", post, edit, first_part, interval)


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
