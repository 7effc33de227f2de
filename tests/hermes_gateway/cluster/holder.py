"""A session holder in a process of its own (`python -m tests.hermes_gateway.cluster.holder
REDIS_URL PREFIX STORE_URL INBOX_ID`): takes the session's lease, claims it in the store, renews
it in the background, and on each "write" line on stdin tries to answer the inbox entry under
its token, printing "@@ written" or "@@ fenced" (other lines are its logs)."""

from __future__ import annotations

import asyncio
import sys

from hermes_gateway.cluster.lease import Lease
from hermes_gateway.cluster.on_redis import RedisCoordinator
from hermes_gateway.errors import CoordinationUnavailable, FencedOut
from hermes_gateway.store.store import Store

KEY = "telegram:dm:555"
LEASE_S = 1.0


async def keep(coordinator: RedisCoordinator, lease: Lease) -> None:
    while True:
        await asyncio.sleep(LEASE_S / 4)
        try:
            lease = await coordinator.renew(lease) or lease
        except CoordinationUnavailable:
            pass


async def main(redis_url: str, prefix: str, store_url: str, inbox_id: int) -> None:
    coordinator = RedisCoordinator(redis_url, "paused", LEASE_S, prefix=prefix)
    store = Store(store_url)
    await store.open()
    lease = await coordinator.acquire(KEY)
    assert lease is not None
    await store.claim(lease.fence)
    renewing = asyncio.create_task(keep(coordinator, lease))
    print("@@ held", lease.token, flush=True)
    while line := await asyncio.to_thread(sys.stdin.readline):
        if line.strip() != "write":
            continue
        turn = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "late"}]
        try:
            await store.complete_turn(KEY, turn, [inbox_id], "late", "paused", fence=lease.fence)
        except FencedOut:
            print("@@ fenced", flush=True)
        else:
            print("@@ written", flush=True)
    renewing.cancel()
    await store.close()
    await coordinator.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
