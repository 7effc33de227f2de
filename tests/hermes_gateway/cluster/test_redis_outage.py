"""Redis stopped, restarted empty, or frozen: the coordinator says it is unavailable (within a
bounded time), grants nothing meanwhile, so no session is ever owned twice, and recovers by
itself; tokens issued after a restart that lost every key still outrank the earlier ones."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from hermes_gateway.cluster.lease import Control
from hermes_gateway.cluster.on_redis import RedisCoordinator
from hermes_gateway.errors import CoordinationUnavailable
from tests.redis_server import RedisProcess, needs_redis

pytestmark = needs_redis  # the binary CI installs with the shared server
LEASE_S = 1.0
KEY = "telegram:dm:555"


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path)
    server.start()
    yield server
    server.stop()  # SIGKILL ends a frozen server too


@pytest.fixture
async def pair(redis: RedisProcess) -> AsyncIterator[tuple[RedisCoordinator, RedisCoordinator]]:
    a = RedisCoordinator(redis.url, "a", LEASE_S)
    b = RedisCoordinator(redis.url, "b", LEASE_S)
    await a.start()
    await b.start()
    yield a, b
    await a.close()
    await b.close()


async def until_available(coordinator: RedisCoordinator, key: str) -> object:
    """What `acquire` grants once Redis answers again (the caller retries, as the runner will)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return await coordinator.acquire(key)
        except CoordinationUnavailable:
            assert time.monotonic() < deadline, "never recovered"
            await asyncio.sleep(0.1)


async def test_redis_stopped_grants_nothing_and_recovers_after_a_restart(
    redis: RedisProcess, pair: tuple[RedisCoordinator, RedisCoordinator]
) -> None:
    a, b = pair
    held = await a.acquire(KEY)
    assert held is not None and a.available
    redis.stop()
    for call in (a.acquire("other"), b.acquire(KEY), a.renew(held), b.owner(KEY)):
        with pytest.raises(CoordinationUnavailable):
            await call
    assert not a.available and not b.available
    await asyncio.sleep(LEASE_S)  # the holder could not renew: past its deadline it holds nothing
    assert not held.live
    redis.start()  # empty: no persistence
    taken = await until_available(b, KEY)
    assert taken is not None and b.available
    assert taken.token > held.token  # the clock floor: above every token issued before the loss
    assert await a.renew(held) is None  # the old holder cannot get its lease back
    assert await a.owner(KEY) == "b"
    # the control channel comes back too (its stream and group are made again)
    await a.send("b", Control("stop", KEY, sender="a"))
    message = await asyncio.wait_for(b.receive(), 5)
    assert message.kind == "stop"


async def test_a_frozen_redis_fails_calls_in_bounded_time(
    redis: RedisProcess, pair: tuple[RedisCoordinator, RedisCoordinator]
) -> None:
    a, b = pair
    held = await a.acquire(KEY)
    assert held is not None
    redis.freeze(True)
    started = time.monotonic()
    with pytest.raises(CoordinationUnavailable):
        await b.acquire(KEY)
    assert time.monotonic() - started < LEASE_S * 3  # a third of a lease, with room for load
    assert not b.available
    redis.freeze(False)
    taken = await until_available(b, KEY)
    # the freeze outlasted the lease: b may take it (a's deadline passed too), else a still has it
    assert taken is None or (taken.token > held.token and not held.live)
    assert b.available
