"""The bounded agent cache: one `SessionContext` (agent + history) per recently used session.

Everything in it can be rebuilt from the store, so eviction (LRU past `agent_cache_size`, or
idle past `agent_idle_ttl_s`) only costs a history read; active sessions are never evicted.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent_core import AIAgent
from agent_core.history import History

Message = dict[str, Any]


@dataclass(slots=True)
class SessionContext:
    agent: AIAgent
    history: History
    last_used: float = field(default_factory=time.monotonic)
    pinned: int = 0  # active runs holding it


class AgentCache:
    """LRU + idle TTL over `SessionContext`s, built on demand by ``factory``."""

    def __init__(
        self,
        factory: Callable[[str], AIAgent],
        load_history: Callable[[str], Awaitable[list[Message]]],
        *,
        max_size: int,
        idle_ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._load_history = load_history
        self.max_size = max_size
        self.idle_ttl_s = idle_ttl_s
        self._clock = clock
        self._items: OrderedDict[str, SessionContext] = OrderedDict()
        # the keys no run holds, least recently released first: what the LRU may evict. Kept
        # apart so that a cache full of running sessions (a thousand at once) is not walked
        # whole at every acquire to find nothing to evict.
        self._idle: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    async def acquire(self, key: str) -> SessionContext:
        """The context for ``key``, pinned until `release`; loads history on a miss."""
        ctx = self._items.get(key)
        if ctx is None:
            history = await self._load_history(key)
            ctx = self._items.get(key)  # another awaiter may have filled it meanwhile
            if ctx is None:
                ctx = SessionContext(self._factory(key), History(history))
                self._items[key] = ctx
        self._items.move_to_end(key)
        self._idle.pop(key, None)
        ctx.pinned += 1
        ctx.last_used = self._clock()
        self._shrink()
        return ctx

    def release(self, key: str, ctx: SessionContext) -> None:
        ctx.pinned = max(0, ctx.pinned - 1)
        ctx.last_used = self._clock()
        if ctx.pinned == 0 and self._items.get(key) is ctx:
            self._idle[key] = None
            self._idle.move_to_end(key)

    def peek(self, key: str) -> SessionContext | None:
        return self._items.get(key)

    def note(self, key: str, messages: list[Message]) -> None:
        """Messages the store's history of ``key`` just got from outside a run (a scheduled
        job's answer): a cached context takes them too, so it stays what a reload would be."""
        ctx = self._items.get(key)
        if ctx is not None:
            ctx.history.extend(messages)

    def renew_agent(self, key: str) -> None:
        """Give the session a fresh agent (the old one is still busy on an abandoned thread)."""
        ctx = self._items.get(key)
        if ctx is not None:
            ctx.agent = self._factory(key)

    def evict(self, key: str) -> None:
        self._items.pop(key, None)
        self._idle.pop(key, None)

    def sweep(self) -> int:
        """Drop contexts idle past the TTL; returns how many went."""
        cutoff = self._clock() - self.idle_ttl_s
        stale = [k for k, c in self._items.items() if c.pinned == 0 and c.last_used < cutoff]
        for key in stale:
            del self._items[key]
            self._idle.pop(key, None)
        return len(stale)

    def _shrink(self) -> None:
        while len(self._items) > self.max_size and self._idle:
            key, _ = self._idle.popitem(last=False)
            del self._items[key]
