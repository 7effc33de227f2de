"""The shared pool that runs agents off the event loop: admission (a cap on runs at once, a
share no job may take, and per-user and per-chat caps on runs going and waiting), threads of a
deliberate stack size started as runs need them, and the counters `/status` and `/metrics` show.

Context variables are copied into the worker, so log lines from the agent carry the
session_key, run_id and platform bound on the loop side. See docs/concurrency.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from hermes_gateway.errors import PoolFull

T = TypeVar("T")
# A run's thread mostly waits on a socket; the agent loop is not deeply recursive, and the
# deepest recursion Python allows (a 5,000-deep structure through deepcopy, json, pickle)
# was measured to fit in 256 KB. 1 MB keeps four times that, against the 8 MB of address
# space (and of overcommit, where it is strict) a default thread reserves.
STACK_BYTES = 1024 * 1024
IDLE_S = 30.0  # a thread with no run for this long ends: a burst's threads do not stay
_STACK_SIZE_LOCK = threading.Lock()  # `threading.stack_size` is process-wide
WaitReason = Literal["pool", "user", "chat", "jobs"]


@dataclass(frozen=True, slots=True)
class Tenant:
    """Whom a run counts against: its user and chat ("" for none), and whether it is a
    scheduled job's (jobs never take the share kept for chats)."""

    user: str = ""
    chat: str = ""
    job: bool = False


@dataclass(frozen=True, slots=True)
class Fairness:
    """Caps on one user's and one chat's runs going and waiting (0: no cap), and the threads
    no job may take."""

    user_running: int = 0
    user_waiting: int = 0
    chat_running: int = 0
    chat_waiting: int = 0
    chat_reserve: int = 1


@dataclass(frozen=True, slots=True)
class Wait:
    """Why a run did not start at once (the first cap it hit) and how many wait before it."""

    reason: WaitReason
    ahead: int


@dataclass(frozen=True, eq=False, slots=True)
class _Call:
    job: Callable[[], Any]
    tenant: Tenant
    future: asyncio.Future[Any]
    keys: tuple[str, ...]  # the counters it counts in (`_keys`)


class AgentPool:
    """Runs agent turns on threads, at most ``workers`` at once; runs over a cap wait in
    arrival order and start as soon as no cap holds them (`submit`)."""

    def __init__(
        self,
        workers: int,
        fairness: Fairness | None = None,
        *,
        stack_bytes: int = STACK_BYTES,
        idle_s: float = IDLE_S,
    ) -> None:
        self.workers = workers
        self.fairness = fairness or Fairness(chat_reserve=max(1, workers // 4))
        self._threads = _Threads(stack_bytes, idle_s)
        self._queue: deque[_Call] = deque()
        self._running: Counter[str] = Counter()  # "user:…", "chat:…", "jobs" -> runs going
        self._queued: Counter[str] = Counter()
        # mutated on the loop thread only; a gauge reading one from another thread gets a
        # value that was true a moment ago
        self.waiting = 0
        self.busy = 0
        self.peak_busy = 0
        self.abandoned = 0  # runs given up on whose threads have not returned yet
        self.refused = 0
        self._closed = False

    def submit(
        self,
        fn: Callable[..., T],
        *args: Any,
        tenant: Tenant | None = None,
        on_wait: Callable[[Wait], object] | None = None,
        **kwargs: Any,
    ) -> asyncio.Future[T]:
        """Run ``fn(*args, **kwargs)`` on a pool thread (on the loop). If a cap holds it, it
        waits, and ``on_wait`` hears why, at once; if its user or chat already has as many
        waiting as allowed, `PoolFull` is raised and nothing runs."""
        loop = asyncio.get_running_loop()
        if self._closed:
            raise RuntimeError("the agent pool is shut down")
        tenant = tenant or Tenant()
        ctx = contextvars.copy_context()
        job = functools.partial(ctx.run, fn, *args, **kwargs)
        call = _Call(job, tenant, loop.create_future(), _keys(tenant))
        reason = self._held(tenant)
        if reason is None:
            self._start(call)
            return call.future
        self._refuse_if_full(tenant)
        ahead = len(self._queue)
        self._queue.append(call)
        self._queued.update(call.keys)
        self.waiting += 1
        if on_wait is not None:
            on_wait(Wait(reason, ahead))
        return call.future

    def _held(self, tenant: Tenant) -> WaitReason | None:
        """The first cap that keeps a run of ``tenant`` from starting now, if any."""
        f = self.fairness
        if self.busy >= self.workers:
            return "pool"
        # a pool of one (`hermes cron run`) still runs its job: the share is what is left
        if tenant.job and self._running["jobs"] >= max(1, self.workers - f.chat_reserve):
            return "jobs"
        if (
            tenant.user
            and f.user_running
            and self._running[f"user:{tenant.user}"] >= f.user_running
        ):
            return "user"
        if (
            tenant.chat
            and f.chat_running
            and self._running[f"chat:{tenant.chat}"] >= f.chat_running
        ):
            return "chat"
        return None

    def _refuse_if_full(self, tenant: Tenant) -> None:
        f = self.fairness
        for kind, key, cap in (
            ("user", tenant.user, f.user_waiting),
            ("chat", tenant.chat, f.chat_waiting),
        ):
            if key and cap and self._queued[f"{kind}:{key}"] >= cap:
                self.refused += 1
                raise PoolFull(kind, cap)

    def _start(self, call: _Call) -> None:
        self.busy += 1
        self.peak_busy = max(self.peak_busy, self.busy)
        self._running.update(call.keys)
        loop = call.future.get_loop()

        def work() -> None:
            try:
                outcome: tuple[Any, BaseException | None] = (call.job(), None)
            except BaseException as exc:  # handed to the awaiting side, like an executor
                outcome = (None, exc)
            try:
                loop.call_soon_threadsafe(self._finished, call, outcome)
            except RuntimeError:  # the loop is gone (a thread left behind at shutdown)
                pass

        self._threads.run(work)

    def _finished(self, call: _Call, outcome: tuple[Any, BaseException | None]) -> None:
        self.busy -= 1
        self._running.subtract(call.keys)
        _drop_zeros(self._running, call.keys)
        if not call.future.done():
            result, exc = outcome
            if exc is not None:
                call.future.set_exception(exc)
            else:
                call.future.set_result(result)
        self._admit()

    def _admit(self) -> None:
        """Start every waiting run no cap holds any more, oldest first."""
        if not self._queue or self._closed:
            return
        kept: deque[_Call] = deque()
        while self._queue:
            call = self._queue.popleft()
            if call.future.done():  # cancelled while it waited
                self._unqueue(call)
            elif self.busy < self.workers and self._held(call.tenant) is None:
                self._unqueue(call)
                self._start(call)
            else:
                kept.append(call)
        self._queue = kept

    def _unqueue(self, call: _Call) -> None:
        self.waiting -= 1
        self._queued.subtract(call.keys)
        _drop_zeros(self._queued, call.keys)

    def note_abandoned(self, delta: int) -> None:
        self.abandoned += delta

    def snapshot(self) -> dict[str, int]:
        return {
            "workers": self.workers,
            "busy": self.busy,
            "waiting": self.waiting,
            "peak_busy": self.peak_busy,
            "abandoned": self.abandoned,
            "refused": self.refused,
            "threads": self._threads.alive,
        }

    def shutdown(self) -> None:
        """Drop waiting runs and let running threads finish on their own (called off the
        loop: the waiting runs' futures are cancelled on it)."""
        self._closed = True
        for call in list(self._queue):
            try:
                call.future.get_loop().call_soon_threadsafe(call.future.cancel)
            except RuntimeError:  # the loop is already closed
                pass
        self._threads.close()


def _keys(tenant: Tenant) -> tuple[str, ...]:
    keys = ["jobs"] if tenant.job else []
    keys += [f"user:{tenant.user}"] if tenant.user else []
    keys += [f"chat:{tenant.chat}"] if tenant.chat else []
    return tuple(keys)


def _drop_zeros(counter: Counter[str], keys: tuple[str, ...]) -> None:
    """Forget keys at zero: a counter per user seen would grow for good otherwise."""
    for key in keys:
        if counter[key] <= 0:
            del counter[key]


class _Threads:
    """Threads of ``stack_bytes`` started as work needs them (admission bounds how many runs
    there are); each ends after ``idle_s`` without work.

    New threads are started by a spawner thread of its own, never by the caller: `run` is
    called on the event loop, and `Thread.start` waits there until the new thread has run
    (under a crowd, a wait for the GIL each time: a thousand runs at once cost the loop about
    a quarter of a second of starts).
    """

    def __init__(self, stack_bytes: int, idle_s: float) -> None:
        self._stack = stack_bytes
        self._idle_s = idle_s
        self._cond = threading.Condition()
        self._work: deque[Callable[[], None]] = deque()
        self._idle = 0
        self._closed = False
        self._names = itertools.count()
        self._to_start = 0  # threads asked of the spawner, not started yet
        self._coming = 0  # threads asked for that have not yet looked for work
        self._wake_spawner = threading.Event()
        self._spawner: threading.Thread | None = None
        self.alive = 0

    def run(self, work: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the agent pool is shut down")
            self._work.append(work)
            if self._idle + self._coming >= len(self._work):  # an idle or coming thread
                self._cond.notify()
                return
            self.alive += 1
            self._coming += 1
            self._to_start += 1
            first = self._spawner is None
            if first:
                self._spawner = threading.Thread(
                    target=self._spawn_loop, name="hermes-agent-spawner", daemon=True
                )
        if first:
            assert self._spawner is not None
            self._spawner.start()  # once: its own start is the one the caller waits for
        self._wake_spawner.set()

    def _spawn_loop(self) -> None:
        while True:
            self._wake_spawner.wait()
            with self._cond:
                if self._closed:
                    return
                count, self._to_start = self._to_start, 0
                self._wake_spawner.clear()
            for _ in range(count):
                self._start_one()

    def _start_one(self) -> None:
        with _STACK_SIZE_LOCK:
            # a thread another part starts meanwhile gets this size too, which fits it as well
            before = threading.stack_size(self._stack)
            try:
                name = f"hermes-agent_{next(self._names)}"
                threading.Thread(target=self._loop, name=name, daemon=True).start()
            finally:
                threading.stack_size(before)

    def _loop(self) -> None:
        first = True
        while (work := self._take(first)) is not None:
            first = False
            work()

    def _take(self, first: bool) -> Callable[[], None] | None:
        with self._cond:
            deadline = time.monotonic() + self._idle_s
            if first:  # no longer coming: idle, until it takes work
                self._coming -= 1
            self._idle += 1
            try:
                while not self._work and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._work:
                    return self._work.popleft()
                self.alive -= 1
                return None
            finally:
                self._idle -= 1

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._work.clear()
            self._cond.notify_all()
        self._wake_spawner.set()  # it sees the pool closed and ends
