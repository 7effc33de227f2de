"""One inbox entry reaches its owner twice: a takeover's replay and a "queued" notice for the
same message (each checks that the runner does not hold it, then awaits the store, then hands
it over). The runner takes an entry it already holds only once, so it is answered once."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from hermes_gateway.core.sessions import Pending
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.telegram import FakeTelegram
from tests.harness import dm
from tests.integration.test_cluster import cluster, fast_adapter, tg
from tests.redis_server import needs_redis

pytestmark = [
    needs_redis,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
__all__ = ["fast_adapter", "tg"]


async def test_an_entry_handed_to_the_runner_twice_is_answered_once(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """With `busy_policy: queue` each copy waited its turn and was answered (three replies)."""
    chat = random.randint(10_000, 99_999)
    fake_llm.push(text("once", delay=1.0))
    async with cluster(tmp_path, fake_llm, tg, busy_policy="queue") as (a, _b):
        assert a.ownership is not None
        event = dm("1", "hello", chat=str(chat))
        inbox_id = await a.store.accept(event)
        assert inbox_id is not None
        assert await a.ownership.own(event.session_key)
        a.runner.resume([Pending(event, inbox_id)])  # the replay's copy starts the run
        await a.runner.dispatch(event, inbox_id)  # the notice's copy, while it runs
        a.runner.resume([Pending(event, inbox_id)])  # and a replay's again
        [reply] = await tg.wait_sent(1, chat_id=chat, timeout=20)
        await asyncio.sleep(2.0)  # a second run would have asked and answered by now
        sent = [m["text"] for m in tg.messages_to(chat)]
    assert reply["text"] == "once" and sent == ["once"]
    assert len(fake_llm.requests) == 1, [r["messages"][-1] for r in fake_llm.requests]
