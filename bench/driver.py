"""The load driver: injects user messages into the fake Bot API and times the bot's replies.

One long-poll reader follows the fake's outbox (``/_fake/sent``) and resolves the waiter of
each chat, so the driver costs one HTTP exchange per message plus one per batch of replies,
whatever the number of sessions. Every wait is bounded: a message without a reply in time is
counted as lost and the session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

POLL_WAIT = 2.0  # seconds the fake holds one /_fake/sent long poll


@dataclass
class Load:
    """What one batch of messages did: latencies of the answered ones, and the rest."""

    latencies: list[float] = field(default_factory=list)
    lost: int = 0
    unsent: int = 0  # not sent because the phase's own deadline had passed
    wall_s: float = 0.0

    @property
    def answered(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.answered / self.wall_s if self.wall_s > 0 else 0.0

    def merge(self, other: Load) -> None:
        self.latencies += other.latencies
        self.lost += other.lost
        self.unsent += other.unsent
        self.wall_s += other.wall_s


class Driver:
    """Talks to the fake Bot API's ``/_fake/`` control API; use as ``async with``."""

    def __init__(self, fake_url: str, reply_timeout: float) -> None:
        self.fake_url = fake_url
        self.reply_timeout = reply_timeout
        self._chat_ids = itertools.count(10_000_001)
        self._texts = itertools.count(1)
        self._waiters: dict[int, tuple[str, asyncio.Future[float]]] = {}
        self._next = 0
        self.stray = 0  # replies nobody waited for (late, or unexpected text)
        self._last_reply = time.monotonic()
        self.check: Callable[[], object] | None = None  # raises if the system under test died
        self._reader: asyncio.Task[None] | None = None
        self.http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Driver:
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=POLL_WAIT + 30)
        self.http = aiohttp.ClientSession(connector=connector, timeout=timeout)
        self._next = int((await self.fake_stats())["sent"])
        self._reader = asyncio.create_task(self._read(), name="bench:driver:reader")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self.http is not None:
            await self.http.close()

    def new_chats(self, n: int) -> list[int]:
        """``n`` chat ids never used before in this run: each one is a new session."""
        return [next(self._chat_ids) for _ in range(n)]

    async def fake_stats(self) -> dict[str, Any]:
        assert self.http is not None
        async with self.http.get(f"{self.fake_url}/_fake/stats") as resp:
            data: dict[str, Any] = await resp.json()
            return data

    async def get_updates_count(self) -> int:
        return int((await self.fake_stats())["calls"].get("getUpdates", 0))

    async def _read(self) -> None:
        assert self.http is not None
        url = f"{self.fake_url}/_fake/sent"
        while True:
            try:
                params = {"since": self._next, "wait": POLL_WAIT}
                async with self.http.get(url, params=params) as resp:
                    data = await resp.json()
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.05)  # the fake went away: the phase's timeouts decide
                continue
            now = time.perf_counter()
            for record in data["sent"]:
                self._dispatch(record, now)
            self._next = int(data["next"])

    def _dispatch(self, record: dict[str, Any], now: float) -> None:
        chat = record.get("chat_id")
        waiter = self._waiters.get(chat) if isinstance(chat, int) else None
        text = str(record.get("text") or "")
        if waiter is None or not text.endswith(waiter[0]) or waiter[1].done():
            self.stray += 1
            return
        del self._waiters[chat]  # type: ignore[arg-type]
        waiter[1].set_result(now)
        self._last_reply = time.monotonic()

    async def ask(self, chat_id: int, timeout: float | None = None, **sender: Any) -> float | None:
        """Send one message to ``chat_id`` and wait for its reply: the latency, or None.
        ``sender``: the fake's `send_text` options (``chat_type``, ``user_id``)."""
        assert self.http is not None
        text = f"ping {next(self._texts)}"
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters[chat_id] = (f" {text.split()[1]}", future)
        body = {"chat_id": chat_id, "text": text, **sender}
        sent = time.perf_counter()
        try:
            async with self.http.post(f"{self.fake_url}/_fake/send_text", json=body) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"fake refused send_text: {resp.status} {await resp.text()}")
            done = await asyncio.wait_for(future, timeout or self.reply_timeout)
        except TimeoutError:
            return None
        finally:
            if self._waiters.get(chat_id, (None, None))[1] is future:
                del self._waiters[chat_id]
        return done - sent

    async def sequential(self, chat_id: int, count: int, deadline: float) -> Load:
        """``count`` messages in one session, each sent when the previous one is answered."""
        return await self.sessions([chat_id], count, deadline)

    async def sessions(self, chat_ids: list[int], per_session: int, deadline: float) -> Load:
        """Every chat a closed loop of ``per_session`` messages, all chats at once."""
        load = Load()

        async def one(chat_id: int) -> None:
            for _ in range(per_session):
                await self._step(chat_id, load, deadline)

        started = time.perf_counter()
        await asyncio.gather(*(one(c) for c in chat_ids))
        load.wall_s = time.perf_counter() - started
        return load

    async def flood(self, chat_ids: Iterable[int], concurrency: int, deadline: float) -> Load:
        """One message from each chat, ``concurrency`` chats in flight at a time."""
        queue = iter(chat_ids)
        load = Load()

        async def worker() -> None:
            for chat_id in queue:  # a shared iterator: each chat goes to one worker
                await self._step(chat_id, load, deadline)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        load.wall_s = time.perf_counter() - started
        return load

    async def _step(self, chat_id: int, load: Load, deadline: float) -> None:
        """One message of a load, unless the load has to stop: past its deadline, or the
        system under test lost a message and has answered nothing for a whole reply timeout
        (wedged: waiting out every remaining message would take hours). A dead process
        raises from ``check``."""
        if self.check is not None:
            self.check()
        now = time.monotonic()
        wedged = load.lost > 0 and now - self._last_reply > self.reply_timeout
        if now >= deadline or wedged:
            load.unsent += 1
            return
        latency = await self.ask(chat_id)
        if latency is None:
            load.lost += 1
        else:
            load.latencies.append(latency)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
