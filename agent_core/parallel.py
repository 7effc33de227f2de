"""`ToolExecutor`: runs a batch of parallel-safe tool calls at once on a small pool of its own.

It is not the gateway's run pool: a run's worker thread waits here on tool threads, never on
another run's slot, so a full run pool cannot deadlock it. The calling thread runs the first
job itself, and a job already on a tool thread runs its own batches inline (no waiting on this
pool from inside it).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class ToolExecutor:
    """A lazily started pool of ``workers`` threads for parallel tool calls."""

    def __init__(self, workers: int = 4) -> None:
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed = False

    def map(self, jobs: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``jobs`` concurrently; results in the jobs' order. Every job is waited for
        before an exception from one of them is raised."""
        if len(jobs) <= 1 or self.workers <= 1 or getattr(self._local, "inside", False):
            return [job() for job in jobs]
        pool = self._ensure()
        if pool is None:
            return [job() for job in jobs]
        futures: list[Future[T]] = [
            pool.submit(contextvars.copy_context().run, self._inside, job) for job in jobs[1:]
        ]
        first: list[T] = []
        error: BaseException | None = None
        try:
            first.append(jobs[0]())
        except BaseException as exc:
            error = exc
        rest: list[T] = []
        for job, future in zip(jobs[1:], futures, strict=True):
            try:
                rest.append(future.result())
            except CancelledError:  # the pool was shut down under us: run it here
                rest.append(job())
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error
        return first + rest

    def _inside(self, job: Callable[[], T]) -> T:
        self._local.inside = True
        return job()

    def _ensure(self) -> ThreadPoolExecutor | None:
        with self._lock:
            if self._closed:
                return None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="hermes-tool")
            return self._pool

    def shutdown(self) -> None:
        """Stop taking batches (later ones run inline); running jobs finish on their own."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
