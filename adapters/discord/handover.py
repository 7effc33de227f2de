"""A shard's newest message ids, kept for its next holder in a cluster: Discord replays nothing
to a new session, so the instance that takes a shard over (after a SIGKILL, about a lease with
no connection) fetches from these ids what was posted while nobody held it."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import structlog

import discord
from adapters.discord.catchup import CatchUp
from hermes_gateway.platforms import CoordinationUnavailable

if TYPE_CHECKING:
    from adapters.discord.shards import Fleet

log = structlog.get_logger("hermes.adapters.discord")


class IntakeMarks:
    """Per channel, the newest message id whose intake is over (stored, or dropped on
    purpose), held below any message of that channel still being taken: a kept id never
    passes a message that is not in the inbox yet, so the next holder fetches that one."""

    def __init__(self) -> None:
        self._done: OrderedDict[int, int] = OrderedDict()  # channel -> id, least recent first
        self._taking: dict[int, set[int]] = {}  # channel -> ids being taken now
        self.dirty = False

    def begin(self, message: discord.Message) -> None:
        self._taking.setdefault(message.channel.id, set()).add(message.id)

    def end(self, message: discord.Message) -> None:
        channel_id = message.channel.id
        taking = self._taking.get(channel_id, set())
        taking.discard(message.id)
        if not taking:
            self._taking.pop(channel_id, None)
        self._done[channel_id] = max(self._done.pop(channel_id, 0), message.id)
        while len(self._done) > CatchUp.max_channels:
            self._done.popitem(last=False)
        self.dirty = True

    def merge(self, last: Mapping[int, int]) -> None:
        """Add what the shard's last holder kept (a newer id seen here stays)."""
        for channel_id, message_id in last.items():
            if channel_id not in self._done:
                self._done[channel_id] = message_id
                self._done.move_to_end(channel_id, last=False)
            else:
                self._done[channel_id] = max(self._done[channel_id], message_id)
        while len(self._done) > CatchUp.max_channels:
            self._done.popitem(last=False)

    def snapshot(self) -> dict[str, str]:
        """channel id -> the id to fetch after, as strings for the coordination store."""
        marks: dict[str, str] = {}
        for channel_id, last in self._done.items():
            taking = self._taking.get(channel_id)
            mark = min(last, min(taking) - 1) if taking else last
            marks[str(channel_id)] = str(mark)
        return marks


def parse(values: Mapping[str, str]) -> dict[int, int]:
    """The kept map back as ids; what is not a pair of ids is skipped."""
    return {int(k): int(v) for k, v in values.items() if k.isdigit() and v.isdigit()}


class MarkSync:
    """Writes each dirty shard's marks through the fleet's shares at most once a `period_s`,
    off the message path; and reads them for a shard just taken, until a read succeeds."""

    period_s = 1.0

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.task: asyncio.Task[None] | None = None
        self._warned = False

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self._run(), name="adapter:discord:marks")

    async def stop(self) -> None:
        """Stop writing, after a last write of what changed (a clean stop hands it over)."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None
            await self.flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            await self.flush()

    async def flush(self) -> None:
        for n, shard in list(self.fleet.shards.items()):
            try:
                if not shard.recalled:
                    await shard.recall()
                elif shard.marks.dirty:
                    await self._write(n, shard.marks)
            except CoordinationUnavailable as exc:
                self._warn(n, exc)
                return
            except Exception:  # a bug must not end the writes: the next holder would miss
                log.exception("discord.marks_failed", shard=n)
        self._warned = False

    async def _write(self, n: int, marks: IntakeMarks) -> None:
        marks.dirty = False
        try:
            await self.fleet.shares.note(n, marks.snapshot(), CatchUp.max_age_s)
        except BaseException:
            marks.dirty = True  # written next time
            raise

    def _warn(self, n: int, exc: CoordinationUnavailable) -> None:
        if not self._warned:
            self._warned = True
            log.warning("discord.marks_unavailable", shard=n, error=str(exc))
