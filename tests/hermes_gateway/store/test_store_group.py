"""Group commit on the owned SQLite writer: per-message writes that queue while one commits
share the next transaction, and each caller still gets its own answer: its new id, its
redelivery refused, its stale fencing token refused with nothing of it written."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from hermes_gateway.errors import FencedOut, StoreError
from hermes_gateway.store.store import Fence, Store
from tests.harness import dm

TURN = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


async def test_concurrent_writes_share_commits_and_each_gets_its_own_answer(
    store: Store, tmp_path: Path
) -> None:
    """200 messages accepted at once, 20 of them delivered twice: fewer commits than writes,
    a distinct id for each new message, None for each redelivery, every row there once."""
    groups = store._groups
    assert groups is not None
    events = [dm(str(i), f"m{i}", chat=str(1000 + i % 50)) for i in range(200)]
    answers = await asyncio.gather(*(store.accept(e) for e in [*events, *events[:20]]))
    ids = [i for i in answers[:200] if i is not None]
    assert len(set(ids)) == 200
    assert answers[200:] == [None] * 20
    assert groups.commits <= 220 / 4
    # turns of 50 sessions at once, each in its own savepoint
    commits = groups.commits
    await asyncio.gather(
        *(
            store.complete_turn(e.session_key, TURN, [i], "hello", f"run{n}")
            for n, (e, i) in enumerate(zip(events[:50], ids[:50], strict=True))
        )
    )
    assert groups.commits - commits < 50
    with sqlite3.connect(tmp_path / "state.db") as db:
        assert db.execute("SELECT count(*) FROM inbox").fetchone() == (200,)
        assert db.execute("SELECT count(*) FROM inbox WHERE status = 'done'").fetchone() == (50,)
        assert db.execute("SELECT count(*) FROM messages").fetchone() == (100,)


async def test_a_stale_fence_in_a_group_fails_alone_and_writes_nothing(
    store: Store, tmp_path: Path
) -> None:
    """Writes of two sessions queued together, one under a token another instance's newer
    one replaced: that write raises `FencedOut` and leaves nothing; the others commit."""
    key, other = "telegram:dm:555", "telegram:dm:777"
    first = await store.accept(dm("1", "hi"))
    second = await store.accept(dm("2", "hi", chat="777"))
    assert first is not None and second is not None
    old, new = Fence(key, 1_000), Fence(key, 2_000)
    await store.claim(old)
    await store.claim(new)
    groups = store._groups
    assert groups is not None
    commits, writes = groups.commits, groups.writes
    outcomes = await asyncio.gather(
        store.complete_turn(key, TURN, [first], "late", "run-old", fence=old),
        store.complete_turn(other, TURN, [second], "hello", "run-2", fence=Fence(other, 5)),
        store.progress([first], 1, fence=new),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], FencedOut) and outcomes[1] is None and outcomes[2] is None
    assert groups.commits - commits < groups.writes - writes  # some shared a transaction
    assert await store.history(key) == []
    assert [m["content"] for m in await store.history(other)] == ["hi", "hello"]
    with sqlite3.connect(tmp_path / "state.db") as db:
        rows = db.execute("SELECT id, status, parts_sent FROM inbox ORDER BY id").fetchall()
    assert rows == [(first, "accepted", 1), (second, "done", 0)]


async def test_a_failing_group_fails_each_caller_in_it(store: Store) -> None:
    """A transaction that cannot begin (another connection holds the write lock past the
    wait) fails every write queued in it, each with the driver's error."""
    fast = store._fast
    assert fast is not None and store._groups is not None
    blocker = sqlite3.connect(store.url.split("///", 1)[1], timeout=0.1, isolation_level=None)
    await fast._db.execute("PRAGMA busy_timeout = 100")
    blocker.execute("BEGIN IMMEDIATE")
    try:
        results = await asyncio.gather(
            *(store.accept(dm(str(i), "x")) for i in range(5)), return_exceptions=True
        )
    finally:
        blocker.rollback()
        blocker.close()
    assert [type(r) for r in results] == [StoreError] * 5  # the circuit's, from sqlite3's
    assert await store.accept(dm("9", "x")) is not None  # the writer serves again
