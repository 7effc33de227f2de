"""A run whose session lease is lost stops at once: its model request in flight is cut off,
it sends no other, and nothing of it is written; the instance that takes the session over
answers it once, and the fake model never sees two requests of the session at once. Two
gateways on one store and one Redis, in this test's loop, with the model hung."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from adapters.telegram.adapter import TelegramAdapter
from hermes_gateway.cluster.lease import Lease
from hermes_gateway.core.run import Run
from hermes_gateway.errors import CoordinationUnavailable
from hermes_gateway.server import Gateway
from tests.fakes.openai import FakeOpenAI, hang, text
from tests.fakes.telegram import FakeTelegram
from tests.harness import dm, eventually, make_config
from tests.redis_server import SERVER, needs_redis

pytestmark = [
    needs_redis,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture(autouse=True)
def fast_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TelegramAdapter, "poll_timeout", 1.0)
    monkeypatch.setattr(TelegramAdapter, "retry_first", 0.1)


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, lease_s: float
) -> AsyncIterator[tuple[Gateway, Gateway]]:
    """Instances "a" and "b" on one SQLite store; each names its own model ("model-a",
    "model-b"), so the fake's request log says which instance asked."""
    suffix = uuid.uuid4().hex[:8]
    gateways = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            section = {"enabled": True, "token": TOKEN, "allow_all": True}
            section.update(base_url=tg.api_url, base_file_url=tg.file_url)
            config = make_config(
                tmp_path / name,
                llm.base_url,
                model={"name": f"model-{name}", "timeout_s": 30},
                platforms={"telegram": section},
                store={"url": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"},
                cluster={
                    "redis_url": SERVER,
                    "instance_id": f"{name}-{suffix}",
                    "lease_s": lease_s,
                },
            )
            gateway = Gateway(config)
            await gateway.startup()
            gateways.append(gateway)
        yield gateways[0], gateways[1]
    finally:
        for gateway in reversed(gateways):
            await gateway.shutdown()


def request_log(llm: FakeOpenAI) -> list[tuple[float, str]]:
    """(arrival time, model) of every chat request from now on; one session is tracked, so a
    second live request while one is in flight is an overlap (`FakeOpenAI.overlaps`)."""
    log: list[tuple[float, str]] = []

    def session_of(body: dict[str, Any]) -> str:
        log.append((time.monotonic(), str(body.get("model"))))
        return "the session"

    llm.session_of = session_of
    return log


def attempts(db: Path) -> list[int]:
    """Each inbox entry's in-flight mark (a run began and never ended) plus its crashes
    counted: 0 once nothing would count against it at the next start."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT in_flight + attempts FROM inbox ORDER BY id")
        return [row[0] for row in rows]


async def running(gateway: Gateway, key: str) -> Run:
    run = await eventually(lambda: gateway.runner._table.active(key))
    assert isinstance(run, Run)
    await eventually(lambda: run.future is not None)
    return run


async def stopped_after(run: Run, since: float, timeout: float = 15) -> float:
    """Seconds from ``since`` until the run's thread let go (its model call ended)."""
    assert run.future is not None
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.shield(run.future), timeout)
    assert run.future.done(), "the run's model call went on"
    return time.monotonic() - since


async def test_a_lease_taken_over_stops_the_run_and_its_model_call_at_once(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    chat = random.randint(10_000, 99_999)
    fake_llm.push(hang(30))  # a's call never answers; the takeover's replay gets the echo
    requests = request_log(fake_llm)
    async with cluster(tmp_path, fake_llm, tg, lease_s=1) as (a, b):
        event = dm("1", "hello", chat=str(chat))
        key = event.session_key
        await a.reception.submit(event, durable=True)
        run = await running(a, key)
        await eventually(lambda: len(requests) == 1)
        assert a.ownership is not None and b.ownership is not None
        async with Redis.from_url(SERVER) as redis:  # the lease expires in Redis; b takes it
            await redis.delete(f"hermes:session:{key}")
        assert await b.ownership.own(key)
        b.ownership._taking.add(key)  # b keeps the lease for its replay, as its sweep would
        lost = time.monotonic()
        took = await stopped_after(run, lost)
        # given up, not crashed: a's attempt is taken back (it must not lead to quarantine)
        await eventually(lambda: attempts(tmp_path / "state.db") == [0])
        await b.ownership._take_over(key)  # b's replay asks the model once a's call is over
        [reply] = await tg.wait_sent(1, chat_id=chat, timeout=20)
        await asyncio.sleep(1.0)  # a second reply, or a late request of a's, would come by now
        sent = [m["text"] for m in tg.messages_to(chat)]
        history = await b.store.history(key)
    print(f"the run stopped {took * 1000:.0f} ms after its lease was taken")
    assert took < 3.0  # a renewal round (a third of the lease) and the cut, with room for load
    assert reply["text"] == "echo: hello" and sent == ["echo: hello"]
    assert [m for t, m in requests if t > lost and m == "model-a"] == []
    assert fake_llm.overlaps == []  # the hung call was closed before b's replay asked
    # a wrote nothing: only b's turn is in the history (no "[interrupted]" turn of a's)
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "hello"),
        ("assistant", "echo: hello"),
    ]


async def test_a_lease_not_renewed_is_given_up_before_it_can_expire_in_redis(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """a stops renewing (its coordination loops end, as if Redis no longer answered it): its
    run is interrupted at the lease's deadline less the margin, while Redis still holds the
    lease, so no other instance can have taken the session yet; b answers after the expiry."""
    chat = random.randint(10_000, 99_999)
    fake_llm.push(hang(30))
    requests = request_log(fake_llm)
    async with cluster(tmp_path, fake_llm, tg, lease_s=3) as (a, b):
        event = dm("1", "hello", chat=str(chat))
        key = event.session_key
        await a.reception.submit(event, durable=True)
        run = await running(a, key)
        await eventually(lambda: len(requests) == 1)
        assert a.ownership is not None
        for task in a.ownership._tasks:  # no renewal from now on
            task.cancel()
        cancelled = time.monotonic()
        async with Redis.from_url(SERVER) as redis:
            while not run.future.done():  # type: ignore[union-attr]
                await asyncio.sleep(0.01)
            left_ms = await redis.pttl(f"hermes:session:{key}")
            owner = await redis.hget(f"hermes:session:{key}", "owner")
        took = time.monotonic() - cancelled
        stop = time.monotonic()
        [reply] = await tg.wait_sent(1, chat_id=chat, timeout=20)
        await asyncio.sleep(1.0)
        sent = [m["text"] for m in tg.messages_to(chat)]
    print(f"stopped {took:.2f} s after the last renewal round, {left_ms} ms before Redis expiry")
    assert owner is not None and owner.decode() == a.ownership.me
    assert left_ms > 0  # a stopped while its lease still stood in Redis
    assert reply["text"] == "echo: hello" and sent == ["echo: hello"]
    assert [m for t, m in requests if t > stop and m == "model-a"] == []
    assert fake_llm.overlaps == []


async def test_a_failed_renewal_is_tried_again_soon_and_the_lease_kept(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """The first three renewals cannot reach Redis: tried again every `retry_s` (0.2 s), not
    a third of the lease later (that would pass the lease's deadline less the margin), the
    fourth gets through in time, so the run goes on and answers, with no lease lost."""
    chat = random.randint(10_000, 99_999)
    fake_llm.push(text("kept", delay=3))
    async with cluster(tmp_path, fake_llm, tg, lease_s=2) as (a, _b):
        assert a.ownership is not None
        coordinator = a.ownership.coordinator
        renew_all, calls, lost = coordinator.renew_all, [], []

        async def flaky(leases: list[Lease]) -> list[Lease | None]:
            calls.append(time.monotonic())  # a round of the session leases' renewals
            if len(calls) <= 3:
                raise CoordinationUnavailable("Redis: TimeoutError (the test)")
            return await renew_all(leases)

        coordinator.renew_all = flaky  # type: ignore[method-assign]
        relinquish = a.runner.relinquish
        a.runner.relinquish = lambda key: (lost.append(key), relinquish(key))  # type: ignore[method-assign]
        event = dm("1", "hello", chat=str(chat))
        await a.reception.submit(event, durable=True)
        [reply] = await tg.wait_sent(1, chat_id=chat, timeout=20)
    assert reply["text"] == "kept" and lost == []
    assert len(calls) >= 4
    # three retries came within two renewal rounds (a third of the lease each)
    assert calls[3] - calls[0] < 2 * 2 / 3
