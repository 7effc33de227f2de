"""A run's state changes in batches: the runs that start (claimed -> running) or finish
(running -> outcome) at the same moment share one UPDATE in one transaction, instead of one
transaction each. Each change keeps its own guard (ours, still in the state it left), so a run
reaped meanwhile is reported lost exactly as a lone UPDATE would report it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")
R = TypeVar("R")
MAX_BATCH = 50  # CASE branches per statement: well within the drivers' parameter limits


class Coalescer(Generic[K, R]):
    """Calls made while a flush is under way wait for the next one, which serves them all."""

    def __init__(self, flush: Callable[[list[K]], Awaitable[list[R]]]) -> None:
        self._flush = flush
        self._pending: list[tuple[K, asyncio.Future[R]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, item: K) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="ledger-batch")
        return await future

    async def settle(self) -> None:
        """Wait for the flush under way (a stop records after the last state change)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _drain(self) -> None:
        while self._pending:
            await asyncio.sleep(0)  # the callers of this same moment join the batch
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            try:
                results = await self._flush([item for item, _ in batch])
            except Exception as exc:  # each caller sees the store's failure, as alone
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():  # a caller cancelled (a stop) gets nothing
                    future.set_result(result)


@dataclass(frozen=True, slots=True)
class Finish:
    run_id: int
    status: str
    now: float
    output: str | None
    error: str | None
    delivery: str
    files: str | None = None  # the answer's files (JSON), as the ledger keeps them
