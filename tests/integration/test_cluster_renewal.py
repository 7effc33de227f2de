"""Leases kept under load: an instance that holds many session leases keeps them all when each
round trip to Redis is slow (a loaded host: every request 10 ms late), as a renewal round is one
round trip, not one per lease; and a new lease whose token took seconds to record in the store
(a burst of new sessions on a loaded database) is renewed before it can run out unused."""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from hermes_gateway.server import Gateway
from hermes_gateway.store.fence import Fence
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import dm, make_config
from tests.integration.test_cluster_lease import cluster, fast_adapter, tg
from tests.redis_server import SERVER, SOCKET, needs_redis

pytestmark = [
    needs_redis,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
__all__ = ["fast_adapter", "tg"]
DELAY_S = 0.01  # each request's extra latency on its way to Redis
SESSIONS = 300  # 300 x 10 ms: one call per lease would take 3 s a round, past the lease
LEASE_S = 3.0


@contextlib.asynccontextmanager
async def slow_link(target: str) -> AsyncIterator[str]:
    """A Unix-socket relay to the Redis at ``target`` (a socket path) that holds each chunk
    the client sends for `DELAY_S`; yields the test server's URL (its database) through it."""
    home = Path(tempfile.mkdtemp(prefix="slowlink", dir="/tmp"))  # socket paths are short
    path = str(home / "redis.sock")

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await src.read(65536):
                await asyncio.sleep(delay)
                dst.write(data)
                await dst.drain()
        dst.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(target)
        await asyncio.gather(
            pipe(reader, up_writer, DELAY_S), pipe(up_reader, writer, 0.0), return_exceptions=True
        )

    server = await asyncio.start_unix_server(relay, path)
    try:
        yield SERVER.replace(target, path)
    finally:
        server.close()
        shutil.rmtree(home, ignore_errors=True)


async def test_hundreds_of_busy_sessions_keep_their_leases_over_a_slow_link(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    me = f"a-{uuid.uuid4().hex[:8]}"
    keys = [f"slack:dm:R{uuid.uuid4().hex[:8]}{i}" for i in range(SESSIONS)]
    async with slow_link(SOCKET) as url:
        config = make_config(
            tmp_path,
            fake_llm.base_url,
            store={"url": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"},
            cluster={"redis_url": url, "instance_id": me, "lease_s": LEASE_S},
        )
        gateway = Gateway(config)
        await gateway.startup()
        try:
            ownership = gateway.ownership
            assert ownership is not None
            lost: list[str] = []
            relinquish = gateway.runner.relinquish
            gateway.runner.relinquish = lambda key: (lost.append(key), relinquish(key))  # type: ignore[method-assign]
            for key in keys:
                assert await ownership.own(key)
                # busy, as a session waiting for the pool is: its lease must be kept
                ownership._taking.add(key)
            await asyncio.sleep(2 * LEASE_S)  # every lease needed renewing at least twice
            held = set(ownership.leases)
            async with Redis.from_url(SERVER) as redis:
                owners = [await redis.hget(f"hermes:session:{key}", "owner") for key in keys]
        finally:
            await gateway.shutdown()
    assert lost == []
    assert held >= set(keys)
    assert owners == [me.encode()] * SESSIONS


async def test_a_lease_whose_claim_took_most_of_it_is_renewed_not_lost(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    """Recording the new lease's token takes 3.2 s of a 4 s lease (its holder's deadline less
    the 1 s margin is 3 s): the lease is renewed at once, so the message runs under it and is
    answered without the lease ever being given up."""
    chat = random.randint(10_000, 99_999)
    async with cluster(tmp_path, fake_llm, tg, lease_s=4) as (a, _b):
        claim, lost = a.store.claim, []

        async def slow(fence: Fence) -> None:
            await asyncio.sleep(3.2)
            await claim(fence)

        a.store.claim = slow  # type: ignore[method-assign]
        relinquish = a.runner.relinquish
        a.runner.relinquish = lambda key: (lost.append(key), relinquish(key))  # type: ignore[method-assign]
        event = dm("1", "hello", chat=str(chat))
        await a.reception.submit(event, durable=True)
        [reply] = await tg.wait_sent(1, chat_id=chat, timeout=20)
    assert reply["text"] == "echo: hello"
    assert lost == []
    assert len(fake_llm.requests) == 1
