"""Telegram long polling without PTB's `Updater`: getUpdates as a plain call on the gateway's
transport, each update parsed once, and the offset moved past an update only once it was taken
into the inbox, so neither a crash nor a store that cannot write loses one."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import structlog

from adapters.shims.ptb import retry_after_s
from adapters.telegram.http import AiohttpRequest
from hermes_gateway.platforms import AdapterAuthError, Backoff
from telegram import Bot, Update
from telegram.error import InvalidToken, RetryAfter, TelegramError, TimedOut

log = structlog.get_logger("hermes.adapters.telegram")
POLL_BATCH = 20  # updates per getUpdates answer: a burst is parsed 20 at a time (loop lag)
Take = Callable[[Update], Awaitable[bool]]  # False: not stored, keep it with Telegram
OnError = Callable[[TelegramError], None]


def parse_updates(items: Any, bot: Bot | None) -> Iterator[tuple[Update | None, int]]:
    """Each usable item of a getUpdates ``result`` as (update, update_id), parsed as it is
    reached; the update is None when python-telegram-bot cannot parse it (logged): its id
    still moves the offset past it, or Telegram would hand it over again forever. Items
    without an id are dropped."""
    for item in items if isinstance(items, list) else [items]:
        uid = item.get("update_id") if isinstance(item, dict) else None
        if not isinstance(uid, int) or isinstance(uid, bool):
            log.warning("telegram.update_unusable", reason="no update_id", update=repr(item)[:200])
            continue
        try:
            update: Update | None = Update.de_json(item, bot)
        except Exception as exc:
            log.warning("telegram.update_unparseable", update_id=uid, error=repr(exc)[:200])
            update = None
        yield update, uid


class Poller:
    """One getUpdates loop; `run` until cancelled, then `confirm` what was taken."""

    backoff_first, backoff_max = 1.0, 30.0  # after an error (PTB's Updater used the same)
    short_poll_pause = 0.5  # between short polls (a lease too short for a long poll)
    paused_check_s = 10.0  # while the store cannot write: a getUpdates that takes nothing

    def __init__(
        self,
        bot: Bot,
        request: AiohttpRequest,
        take: Take,
        *,
        timeout: float,
        read_margin: float,
        allowed_updates: Sequence[str],
        on_error: OnError,
        writable: Callable[[], Awaitable[None]],
        budget: Callable[[], float] = lambda: math.inf,
    ) -> None:
        self.bot = bot
        self.request = request
        self.take = take
        self.timeout = timeout
        self.read_margin = read_margin  # getUpdates' read timeout is the wait plus this
        self.allowed_updates = list(allowed_updates)
        self.on_error = on_error
        self.writable = writable  # returns once the store can take updates again
        # seconds a getUpdates may wait and still end while this instance leads polling (in
        # a cluster: so no two instances' long polls overlap and Telegram answers 409)
        self.budget = budget
        self.refused_pause = 0.0  # after the store refused an update: grows while it does
        self.offset: int | None = None  # the next update wanted: confirms all before it
        self._confirmed: int | None = None  # the offset Telegram last saw

    def forget_offset(self) -> None:
        """Poll from what Telegram keeps for the bot: another instance led polling meanwhile,
        so an offset of ours may be behind what it confirmed."""
        self.offset = None

    async def run(self) -> None:
        """Poll until cancelled. A rejected token ends it with `AdapterAuthError`; every other
        failure is reported to ``on_error`` and retried with a growing pause."""
        await self.request.initialize()  # its own connections (idempotent)
        backoff = Backoff(self.backoff_first, self.backoff_max, factor=1.5, jitter=0)
        while True:
            pause, budget = 0.0, self.budget()
            if budget <= 0:  # not leading (the adapter stops this loop when the lease is lost)
                await asyncio.sleep(0.2)
                continue
            # getUpdates waits whole seconds: under one second left, a short poll, then a pause
            wait = min(self.timeout, budget) if budget >= 1.0 else 0.0
            try:
                items = await self._fetch(wait)
            except InvalidToken as exc:  # its text may quote the token
                raise AdapterAuthError("Telegram rejected the bot token while polling") from exc
            except RetryAfter as exc:
                pause = 0.5 + retry_after_s(exc)
            except TimedOut:
                backoff.reset()  # a long poll Telegram did not answer in time: ask again at once
            except TelegramError as exc:
                self.on_error(exc)
                pause = backoff.next()
            else:
                backoff.reset()
                taken, refused = await self._take_all(items)
                if refused:
                    await self._wait_for_store()
                    continue
                if not items and not wait:
                    pause = self.short_poll_pause
                if items and not taken:
                    # nothing in the answer had an id, so nothing can be confirmed: asking again
                    # at once would get the same answer, in a tight loop
                    pause = self.backoff_max
            if pause:
                await asyncio.sleep(pause)

    async def confirm(self, timeout: float = 2.0) -> None:
        """Tell Telegram the updates taken since the last getUpdates are done (a stop), so a
        restart does not fetch them again; best effort: the inbox drops repeats anyway."""
        if self.offset is None or self.offset == self._confirmed:
            return
        try:
            async with asyncio.timeout(timeout):
                await self._fetch(0, limit=1)
        except (TelegramError, TimeoutError) as exc:
            log.debug("telegram.confirm_failed", error=repr(exc))

    async def close(self) -> None:
        await self.request.shutdown()

    async def _fetch(self, wait: float, limit: int = POLL_BATCH) -> Any:
        fields: dict[str, Any] = {
            "timeout": int(wait),
            "limit": limit,
            "allowed_updates": self.allowed_updates,
        }
        if self.offset is not None:
            fields["offset"] = self.offset
        url = f"{self.bot.base_url}/getUpdates"
        result = await self.request.call(url, fields, read_timeout=wait + self.read_margin)
        self._confirmed = self.offset
        return result

    async def _wait_for_store(self) -> None:
        """Polling pauses while the store cannot write: what Telegram holds stays there (the
        offset did not move past it) and is fetched again once the store can take it."""
        log.warning("telegram.intake_paused", offset=self.offset, reason="store cannot write")
        while True:
            try:
                async with asyncio.timeout(self.paused_check_s):
                    await self.writable()
                break
            except TimeoutError:
                pass
            # a getUpdates that confirms nothing new: polling's watchdog sees it alive, and a
            # revoked token still ends it
            try:
                await self._fetch(0, limit=1)
            except InvalidToken as exc:
                raise AdapterAuthError("Telegram rejected the bot token while polling") from exc
            except TelegramError:
                pass
        # a store that says writable and still refuses (a write that fails differently)
        # must not turn this into a tight getUpdates loop
        self.refused_pause = min(5.0, max(0.2, self.refused_pause * 2))
        await asyncio.sleep(self.refused_pause)
        log.info("telegram.intake_resumed", offset=self.offset)

    async def _take_all(self, items: Any) -> tuple[int, bool]:
        """Take the updates, each chat's in order and the chats side by side, so their inbox
        writes share one commit (one after the other, a burst came in at one commit per
        message, about 100 a second). Returns how many had an id, and whether one was
        refused: the offset stays on the first refused, and the later ones taken meanwhile
        come again and are dropped by the inbox as repeats."""
        chats: dict[object, list[tuple[Update | None, int]]] = {}
        count = 0
        for update, uid in parse_updates(items, self.bot):
            count += 1
            chat = update.effective_chat if update is not None else None
            chats.setdefault(uid if chat is None else chat.id, []).append((update, uid))
        refused = await asyncio.gather(*map(self._take_chat, chats.values()))
        first = min((uid for uid in refused if uid is not None), default=None)
        if first is not None:
            if self.offset is None or first > self.offset:
                self.offset = first  # confirms the ones before it, not this one
            return count, True
        last = max((uid for updates in chats.values() for _, uid in updates), default=None)
        if last is not None and (self.offset is None or last >= self.offset):
            self.offset = last + 1
        self.refused_pause = 0.0
        return count, False

    async def _take_chat(self, updates: list[tuple[Update | None, int]]) -> int | None:
        """One chat's updates in order, stopping at one the store refused: its id."""
        for update, uid in updates:
            if update is not None and not await self.take(update):
                return uid
        return None
