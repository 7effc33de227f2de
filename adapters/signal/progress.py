"""What a Signal user sees while a run works: the progress reaction on the message being
answered (added at `processing_start`, removed at the run's first end event), and the typing
indicator through the gateway's `TypingIndicator`."""

from __future__ import annotations

import asyncio

import structlog

from adapters.signal.inbound import quoted, target
from adapters.signal.ledger import Ledger, Sent
from adapters.signal.rpc import Daemon
from hermes_gateway.platforms import AdapterError, MessageEvent

log = structlog.get_logger("hermes.adapters.signal")


class Progress:
    """One reaction per run; a failure to show or remove it never touches the reply. Each
    reaction's timestamp is recorded: the receipts for it are no evidence of a reply part."""

    def __init__(self, daemon: Daemon, ledger: Ledger, emoji: str) -> None:
        self.daemon = daemon
        self.ledger = ledger
        self.emoji = emoji
        self._shown: dict[str, MessageEvent] = {}  # run_id -> the message reacted to

    @property
    def active(self) -> int:
        return len(self._shown)

    async def show(self, run_id: str, message: MessageEvent) -> None:
        if not self.emoji or not run_id or run_id in self._shown:
            return
        if await self._react(message, remove=False):
            self._shown[run_id] = message

    async def clear(self, run_id: str) -> None:
        message = self._shown.pop(run_id, None)
        if message is not None:
            await self._react(message, remove=True)

    async def clear_all(self) -> None:
        await asyncio.gather(*(self.clear(run_id) for run_id in list(self._shown)))

    async def _react(self, message: MessageEvent, *, remove: bool) -> bool:
        where = quoted(message.message_id)
        if where is None:
            return False
        author, ts = where
        params = {
            **target(message.chat_id),
            "emoji": self.emoji,
            "targetAuthor": author,
            "targetTimestamp": ts,
            "remove": remove,
        }
        try:
            result = await self.daemon.call("sendReaction", params)
        except AdapterError as exc:
            log.info("signal.progress_failed", remove=remove, error=str(exc))
            return False
        sent = result.get("timestamp") if isinstance(result, dict) else None
        if isinstance(sent, int):
            self.ledger.note_sent(Sent(message.chat_id, sent))
            await self.ledger.save()
        return True
