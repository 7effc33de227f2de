"""A real paused process: the holder of a session is SIGSTOPped past its lease, another
instance takes the session over, and once SIGCONTinued the holder's turn is refused by the
store (it wakes up believing it still owns the session and writes at once)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from hermes_gateway.cluster.on_redis import RedisCoordinator
from hermes_gateway.store.store import Store
from tests.harness import dm
from tests.hermes_gateway.cluster.holder import KEY, LEASE_S
from tests.redis_server import SERVER, needs_redis

pytestmark = needs_redis
ROOT = Path(__file__).resolve().parents[3]


def line(proc: subprocess.Popen[str]) -> str:
    """The holder's next answer (its log lines skipped)."""
    assert proc.stdout is not None
    for text in proc.stdout:
        if text.startswith("@@ "):
            return text[3:].strip()
    raise AssertionError(f"the holder exited: {proc.wait()}")


async def test_a_sigstopped_holder_cannot_write_after_its_lease_passed_on(tmp_path: Path) -> None:
    url, prefix = f"sqlite+aiosqlite:///{tmp_path / 'state.db'}", f"t{uuid.uuid4().hex[:12]}:"
    store = Store(url)
    await store.open()
    successor = RedisCoordinator(SERVER, "successor", LEASE_S, prefix=prefix)
    holder = None
    try:
        inbox_id = await store.accept(dm("1", "hello"))
        assert inbox_id is not None
        args = [sys.executable, "-m", "tests.hermes_gateway.cluster.holder", SERVER, prefix]
        holder = subprocess.Popen(
            [*args, url, str(inbox_id)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        status, token = (await asyncio.to_thread(line, holder)).split()
        assert status == "held"
        assert await successor.acquire(KEY) is None  # renewed: held by the live holder
        holder.send_signal(signal.SIGSTOP)
        await asyncio.sleep(LEASE_S * 2)  # frozen past its lease
        lease = await successor.acquire(KEY)
        assert lease is not None and lease.token > int(token)
        await store.claim(lease.fence)
        holder.send_signal(signal.SIGCONT)
        assert holder.stdin is not None
        holder.stdin.write("write\n")
        holder.stdin.flush()
        assert await asyncio.to_thread(line, holder) == "fenced"
        assert await store.history(KEY) == []
        to_run, _ = await store.replayable(3600)
        assert [i for i, _ in to_run] == [inbox_id]  # still unanswered: the successor's to run
        assert await successor.owner(KEY) == "successor"  # its renewal failed too
    finally:
        if holder is not None:
            holder.send_signal(signal.SIGCONT)
            holder.kill()
            holder.wait()
        await successor.close()
        await store.close()
