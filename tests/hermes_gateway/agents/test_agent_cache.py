"""`AgentCache` (LRU + idle TTL, pinned contexts stay) and `SessionTable` (guard + pending)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermes_gateway.agents.cache import AgentCache, SessionContext
from hermes_gateway.core.sessions import Pending, SessionTable
from hermes_gateway.events import MessageEvent


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """Counts agent builds and history loads."""

    def __init__(self) -> None:
        self.built: list[str] = []
        self.loads: list[str] = []
        self.clock = FakeClock()

    def factory(self, key: str) -> Any:
        self.built.append(key)
        return f"agent:{key}:{len(self.built)}"

    async def load_history(self, key: str) -> list[dict[str, Any]]:
        self.loads.append(key)
        await asyncio.sleep(0)
        return [{"role": "user", "content": f"earlier in {key}"}]

    def cache(self, max_size: int = 2, idle_ttl_s: float = 60) -> AgentCache:
        return AgentCache(
            self.factory, self.load_history, max_size=max_size, idle_ttl_s=idle_ttl_s,
            clock=self.clock,
        )  # fmt: skip


@pytest.fixture
def h() -> Harness:
    return Harness()


async def use(cache: AgentCache, key: str) -> SessionContext:
    """Acquire and release at once: a finished run."""
    ctx = await cache.acquire(key)
    cache.release(key, ctx)
    return ctx


class TestAgentCache:
    async def test_lru_eviction_at_max_size(self, h: Harness) -> None:
        cache = h.cache(max_size=2)
        await use(cache, "a")
        await use(cache, "b")
        await use(cache, "a")  # a is now the most recent
        await use(cache, "c")
        assert len(cache) == 2
        assert "b" not in cache
        assert "a" in cache
        assert "c" in cache

    async def test_pinned_context_is_never_evicted(self, h: Harness) -> None:
        cache = h.cache(max_size=2)
        pinned = await cache.acquire("a")  # an active run: not released
        for key in ("b", "c", "d"):
            await use(cache, key)
        assert "a" in cache
        assert cache.peek("a") is pinned
        assert len(cache) == 2

    async def test_cache_may_overflow_when_everything_is_pinned(self, h: Harness) -> None:
        cache = h.cache(max_size=2)
        for key in ("a", "b", "c"):
            await cache.acquire(key)
        assert len(cache) == 3
        cache.release("a", cache.peek("a"))  # type: ignore[arg-type]
        await use(cache, "b")
        assert "a" not in cache  # shrinks back once something is free
        assert len(cache) == 2

    async def test_a_crowd_of_running_sessions_evicts_only_what_is_released(
        self, h: Harness
    ) -> None:
        cache = h.cache(max_size=10)
        held = {key: await cache.acquire(key) for key in (f"s{n}" for n in range(200))}
        assert len(cache) == 200  # all running: nothing to evict
        for key in ("s150", "s7"):
            cache.release(key, held.pop(key))
        await use(cache, "new")  # over the size: every released one goes, none running
        assert "s150" not in cache and "s7" not in cache and "new" in cache
        await use(cache, "newer")
        assert "new" not in cache and "newer" in cache
        assert all(key in cache for key in held) and len(cache) == 199

    async def test_idle_ttl_sweep(self, h: Harness) -> None:
        cache = h.cache(max_size=10, idle_ttl_s=60)
        await use(cache, "old")
        h.clock.now += 50
        await use(cache, "recent")
        busy = await cache.acquire("busy")
        h.clock.now += 30  # old idle 80 s, recent 30 s, busy pinned
        assert cache.sweep() == 1
        assert "old" not in cache
        assert "recent" in cache
        h.clock.now += 1000
        assert cache.sweep() == 1
        assert "busy" in cache  # pinned: never swept, however old
        cache.release("busy", busy)
        h.clock.now += 61
        assert cache.sweep() == 1
        assert len(cache) == 0

    async def test_history_loaded_once_per_miss(self, h: Harness) -> None:
        cache = h.cache(max_size=1)
        first = await use(cache, "a")
        again = await use(cache, "a")
        assert again is first
        assert h.loads == ["a"]
        await use(cache, "b")  # evicts a
        await use(cache, "a")
        assert h.loads == ["a", "b", "a"]
        assert h.built == ["a", "b", "a"]
        assert first.history.messages == [{"role": "user", "content": "earlier in a"}]

    async def test_concurrent_misses_share_one_context(self, h: Harness) -> None:
        cache = h.cache(max_size=4)
        one, two = await asyncio.gather(cache.acquire("a"), cache.acquire("a"))
        assert one is two
        assert one.pinned == 2
        assert h.built == ["a"]

    async def test_release_unpins_and_touches(self, h: Harness) -> None:
        cache = h.cache()
        ctx = await cache.acquire("a")
        assert ctx.pinned == 1
        h.clock.now += 5
        cache.release("a", ctx)
        cache.release("a", ctx)  # a double release does not go negative
        assert ctx.pinned == 0
        assert ctx.last_used == h.clock.now

    async def test_renew_agent_keeps_history(self, h: Harness) -> None:
        cache = h.cache()
        ctx = await use(cache, "a")
        ctx.history.extend([{"role": "assistant", "content": "hi"}])
        history, old_agent = ctx.history, ctx.agent
        cache.renew_agent("a")
        assert ctx.agent is not old_agent
        assert ctx.agent == "agent:a:2"
        assert ctx.history is history
        assert len(ctx.history) == 2
        cache.renew_agent("missing")  # no context: nothing built
        assert h.built == ["a", "a"]

    async def test_evict(self, h: Harness) -> None:
        cache = h.cache()
        await use(cache, "a")
        cache.evict("a")
        cache.evict("a")
        assert "a" not in cache
        assert cache.peek("a") is None


def _pending(n: int, key: str = "telegram:dm:1") -> Pending:
    event = MessageEvent.create(
        platform="telegram", chat_type="dm", chat_id="1", user_id="1", message_id=str(n),
        text=f"m{n}", received_at=1.0,
    )  # fmt: skip
    assert event.session_key == key
    return Pending(event, inbox_id=n)


KEY = "telegram:dm:1"


class TestSessionTable:
    def test_acquire_and_release(self) -> None:
        table: SessionTable[str] = SessionTable()
        assert table.active(KEY) is None
        assert table.acquire(KEY, "run1")
        assert not table.acquire(KEY, "run2")
        assert table.active(KEY) == "run1"
        assert list(table.active_runs()) == ["run1"]
        table.release(KEY, "run1")
        assert table.active(KEY) is None
        assert table.acquire(KEY, "run2")

    def test_release_by_a_non_owner_is_a_no_op(self) -> None:
        table: SessionTable[str] = SessionTable()
        table.acquire(KEY, "run1")
        table.release(KEY, "stale-run")
        table.release("other:dm:2", "run1")
        assert table.active(KEY) == "run1"
        assert len(table) == 1

    def test_idle_slots_are_forgotten(self) -> None:
        table: SessionTable[str] = SessionTable()
        table.acquire(KEY, "run1")
        table.release(KEY, "run1")
        assert len(table) == 0
        table.acquire(KEY, "run2")
        table.push(KEY, _pending(1))
        table.release(KEY, "run2")
        assert len(table) == 1  # pending work keeps the slot
        assert table.stats() == {"active": 0, "pending": 1, "tracked": 1}
        table.acquire(KEY, "run3")
        assert table.pop_one(KEY) == _pending(1)
        table.release(KEY, "run3")
        assert len(table) == 0

    def test_hand_over_keeps_the_guard(self) -> None:
        table: SessionTable[str] = SessionTable()
        table.acquire(KEY, "run1")
        table.hand_over(KEY, "run1", "run2")
        assert table.active(KEY) == "run2"
        table.release(KEY, "run1")  # the old run no longer owns it
        assert table.active(KEY) == "run2"
        table.hand_over(KEY, "run1", "run3")  # only the holder can hand over
        assert table.active(KEY) == "run2"

    def test_push_pop_in_order(self) -> None:
        table: SessionTable[str] = SessionTable()
        assert [table.push(KEY, _pending(n)) for n in (1, 2, 3)] == [1, 2, 3]
        assert table.pending_count(KEY) == 3
        assert table.pop_one(KEY) == _pending(1)
        assert table.pop_all(KEY) == [_pending(2), _pending(3)]
        assert table.pop_one(KEY) is None
        assert table.pop_all("nobody") == []
        assert table.pending_count("nobody") == 0

    def test_replace_pending_returns_superseded(self) -> None:
        table: SessionTable[str] = SessionTable()
        assert table.replace_pending(KEY, _pending(1)) == []
        table.push(KEY, _pending(2))
        assert table.replace_pending(KEY, _pending(3)) == [_pending(1), _pending(2)]
        assert table.pop_all(KEY) == [_pending(3)]

    def test_push_front_keeps_the_given_order_ahead(self) -> None:
        table: SessionTable[str] = SessionTable()
        table.push(KEY, _pending(3))
        table.push_front(KEY, [_pending(1), _pending(2)])
        assert [p.inbox_id for p in table.pop_all(KEY)] == [1, 2, 3]

    def test_stats(self) -> None:
        table: SessionTable[str] = SessionTable()
        table.acquire(KEY, "run1")
        table.acquire("slack:dm:D1", "run2")
        table.push(KEY, _pending(1))
        table.push(KEY, _pending(2))
        assert table.stats() == {"active": 2, "pending": 2, "tracked": 2}
