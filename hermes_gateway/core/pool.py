"""The shared worker pool that runs agents off the event loop, with visible backpressure.

Context variables are copied into the worker, so log lines from the agent carry the
session_key, run_id and platform bound on the loop side.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class AgentPool:
    """`ThreadPoolExecutor(workers)` plus the counters `/status` and `/metrics` show."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="hermes-agent")
        self._lock = threading.Lock()
        self.waiting = 0
        self.busy = 0
        self.peak_busy = 0
        self.abandoned = 0  # runs given up on whose threads have not returned yet

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        ctx = contextvars.copy_context()
        with self._lock:
            self.waiting += 1

        def call() -> T:
            with self._lock:
                self.waiting -= 1
                self.busy += 1
                self.peak_busy = max(self.peak_busy, self.busy)
            try:
                return ctx.run(fn, *args, **kwargs)
            finally:
                with self._lock:
                    self.busy -= 1

        return asyncio.get_running_loop().run_in_executor(self._executor, call)

    def note_abandoned(self, delta: int) -> None:
        with self._lock:
            self.abandoned += delta

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {
                "workers": self.workers,
                "busy": self.busy,
                "waiting": self.waiting,
                "peak_busy": self.peak_busy,
                "abandoned": self.abandoned,
            }

    def shutdown(self) -> None:
        """Drop queued runs and let running threads finish on their own (blocking: off-loop)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
