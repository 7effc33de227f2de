"""The store's per-message writes with many runs in flight at once: ``--runs`` concurrent
sessions each answer ``--messages`` messages (accept, attempt mark, turn, part progress,
answered: the writes a message makes), on the owned SQLite writer. Prints write transactions
asked for per second, commits per second, and CPU per message.

    python -m bench.store_load [--runs 1000] [--messages 5] [--synchronous NORMAL]

Run it from another checkout (``PYTHONPATH=OTHER python -m bench.store_load``, this file
copied there) to compare: a store without group commit commits once per write.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from hermes_gateway.events import MessageEvent
from hermes_gateway.store.store import Store

WRITES_PER_MESSAGE = 5


async def _session(store: Store, n: int, messages: int) -> None:
    for m in range(messages):
        event = MessageEvent.create(
            platform="telegram",
            chat_type="dm",
            chat_id=str(n),
            user_id=str(n),
            message_id=f"{n}-{m}",
            text=f"ping {m}",
        )
        inbox_id = await store.accept(event)
        assert inbox_id is not None
        await store.mark([inbox_id], "accepted")  # the attempt
        turn = [{"role": "user", "content": event.text}, {"role": "assistant", "content": "ok"}]
        await store.complete_turn(event.session_key, turn, [inbox_id], "ok", f"r{n}-{m}")
        await store.progress([inbox_id], 1)
        await store.mark([inbox_id], "answered", reply="ok")


async def _run(path: Path, runs: int, messages: int) -> dict[str, float]:
    store = Store(f"sqlite+aiosqlite:///{path}")
    await store.open()
    try:
        groups: Any = getattr(store, "_groups", None)
        await asyncio.gather(*(store.history(f"telegram:dm:{n}") for n in range(runs)))
        cpu, started = time.process_time(), time.monotonic()
        await asyncio.gather(*(_session(store, n, messages) for n in range(runs)))
        took, cpu = time.monotonic() - started, time.process_time() - cpu
    finally:
        await store.close()
    writes = runs * messages * WRITES_PER_MESSAGE
    # a session's first turn also makes its session row: one write more per session
    writes += runs
    commits = groups.commits if groups is not None else writes
    return {
        "seconds": took,
        "writes_per_s": writes / took,
        "commits_per_s": commits / took,
        "messages_per_s": runs * messages / took,
        "cpu_ms_per_message": cpu / (runs * messages) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print("| runs | messages/s | writes/s | commits/s | CPU ms/message |")
    print("|---|---|---|---|---|")
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            row = uvloop.run(_run(Path(tmp) / "state.db", args.runs, args.messages))
        print(
            f"| {args.runs} | {row['messages_per_s']:,.0f} | {row['writes_per_s']:,.0f} "
            f"| {row['commits_per_s']:,.0f} | {row['cpu_ms_per_message']:.2f} |"
        )


if __name__ == "__main__":
    main()
