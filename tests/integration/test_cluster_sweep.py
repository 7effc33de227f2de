"""The takeover sweep takes a dead instance's sessions over side by side, not one store claim
after the other: on a loaded database each claim took a second or more, so the last of a few
dozen sessions waited half a minute (the cluster chaos run's takeover times)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.store.store import Fence
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.integration.test_cluster import cluster, fast_adapter, message, tg
from tests.redis_server import needs_redis

pytestmark = [needs_redis]
__all__ = ["fast_adapter", "tg"]
SESSIONS = 6


async def test_a_sweep_claims_the_orphaned_sessions_side_by_side(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    chats = random.sample(range(10_000, 99_999), SESSIONS)
    async with cluster(tmp_path, fake_llm, tg) as (a, b):
        most: list[int] = []  # per instance: its claims in flight at once, at most
        for gw in (a, b):
            monkeypatch.setattr(gw.store, "claim", slow(gw.store.claim, most))
        for chat in chats:  # stored by an instance that died before routing them
            assert await a.store.accept(message(chat, 1, f"orphan {chat}")) is not None
        for chat in chats:
            [reply] = await tg.wait_sent(1, chat_id=chat, timeout=30)
            assert reply["text"] == f"echo: orphan {chat}"
    assert max(most) > 1


def slow(claim: Callable[[Fence], Awaitable[None]], most: list[int]) -> Callable[..., Any]:
    """``claim`` on a loaded database: each waits for another one of the same instance to
    start (1 s at most), and ``most`` gets the most in flight at once."""
    in_flight, another = [0], asyncio.Event()
    most.append(0)
    mine = len(most) - 1

    async def claiming(fence: Fence) -> None:
        in_flight[0] += 1
        most[mine] = max(most[mine], in_flight[0])
        if in_flight[0] > 1:
            another.set()
        try:
            await asyncio.wait_for(another.wait(), 1.0)
        except TimeoutError:
            pass
        finally:
            in_flight[0] -= 1
        await claim(fence)

    return claiming
