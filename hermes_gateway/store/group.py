"""Group commit on the owned SQLite writer: the per-message write transactions that queue
while one is committing run next as one transaction, each body in a savepoint of its own, so
a thousand runs in flight cost one commit, lock turn and thread hop per group, not per write."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from hermes_gateway.errors import StoreError
from hermes_gateway.store.executor import Executor

T = TypeVar("T")
Body = Callable[[Executor], Any]
# a body's outcome: (True, its result) or (False, what it raised)
Outcome = tuple[bool, Any]
RunGroup = Callable[[list[Body]], Awaitable[list[Outcome]]]

MOST = 256  # bodies in one transaction: a bound on the time the write lock is held at once


class GroupCommit:
    """Queues write bodies and runs them in groups: one group at a time, under the store's
    write lock, through ``run`` (the writer's thread: `sqlite.SqliteFastPath.group`). A body
    that raises is rolled back alone and its caller gets what it raised; the others commit.
    A group whose transaction fails (it could not begin or commit) fails every caller in it.
    A cancelled caller stops waiting, not its write (as a single transaction's)."""

    def __init__(self, run: RunGroup, lock: asyncio.Lock) -> None:
        self._run = run
        self._lock = lock
        self._queued: list[tuple[Body, asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None
        self._alone = False  # a write runs by itself, with no group queued: no task needed
        self.writes = 0  # bodies run, and transactions committed (for the bench and tests)
        self.commits = 0

    async def transaction(self, body: Callable[[Executor], T]) -> T:
        """``body`` in a write transaction shared with the others queued meanwhile."""
        if self._task is None and not self._alone and not self._lock.locked():
            return await self._by_itself(body)
        waiter: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queued.append((body, waiter))
        if self._task is None:
            self._task = asyncio.create_task(self._flush(), name="store-group-commit")
        return await waiter

    async def _by_itself(self, body: Callable[[Executor], T]) -> T:
        """Nothing else is writing: ``body`` runs at once in its own transaction (what
        arrives meanwhile queues for the next group)."""
        self._alone = True
        try:
            async with self._lock:
                [(_, result)] = await self._run([body])  # a group of one raises what it raised
        finally:
            self._alone = False
        self.writes += 1
        self.commits += 1
        return result  # type: ignore[no-any-return]

    async def close(self) -> None:
        """Wait for what is queued to be written (the writer closes after this)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _flush(self) -> None:
        group: list[tuple[Body, asyncio.Future[Any]]] = []
        try:
            while self._queued:
                async with self._lock:
                    group, self._queued = self._queued[:MOST], self._queued[MOST:]
                    try:
                        outcomes = await self._run([body for body, _ in group])
                    except Exception as exc:  # the transaction failed: every body with it
                        outcomes = [(False, exc)] * len(group)
                    else:
                        self.writes += len(group)
                        self.commits += 1
                for (_, waiter), outcome in zip(group, outcomes, strict=True):
                    _settle(waiter, outcome)
        finally:
            self._task = None
            # cancelled (the loop is going away): nobody is left waiting for an answer
            for _, waiter in [*group, *self._queued]:
                _settle(waiter, (False, StoreError("the store's writer stopped")))


def _settle(waiter: asyncio.Future[Any], outcome: Outcome) -> None:
    ok, value = outcome
    if waiter.done():
        return
    if ok:
        waiter.set_result(value)
    else:
        waiter.set_exception(value)
