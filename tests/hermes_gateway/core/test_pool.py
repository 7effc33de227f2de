"""The agent pool's sizing rule and admission: runs at once bounded by memory, not by a small
constant; a flooding user or chat held to its caps (and told it waits) while others start."""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from hermes_gateway.config.schema import ControlConfig, RunnerConfig
from hermes_gateway.core import pool as pool_module
from hermes_gateway.core.pool import STACK_BYTES, AgentPool, Fairness, Tenant, Wait
from hermes_gateway.core.sizing import (
    MAX_WORKERS,
    MIN_WORKERS,
    RUN_BYTES,
    Machine,
    auto_workers,
    workers_for,
)
from hermes_gateway.errors import PoolFull

MB = 1024 * 1024
GB = 1024 * MB


def test_auto_size_follows_memory_the_rss_ceiling_and_open_files() -> None:
    # half the memory at RUN_BYTES a run
    assert auto_workers(Machine(256 * MB, None), 0) == 128 * MB // RUN_BYTES
    # the configured RSS ceiling less the idle process, when it is the smaller
    assert auto_workers(Machine(24 * GB, None), 512 * MB) == (512 - 160) * MB // RUN_BYTES
    # one model connection a run, within half the open-file limit
    assert auto_workers(Machine(24 * GB, 1024), 0) == 1024 // 2 - 64
    # clamped both ways
    assert auto_workers(Machine(2 * MB, None), 0) == MIN_WORKERS
    assert auto_workers(Machine(1024 * GB, None), 0) == MAX_WORKERS


def test_the_default_holds_a_thousand_waiting_runs_on_a_small_machine() -> None:
    """The defaults (`workers: auto`, a 512 MB RSS ceiling) on 2 GB and 4,096 open files."""
    runner, control = RunnerConfig(), ControlConfig()
    assert runner.workers is None  # auto
    small = Machine(2 * GB, 4096)
    assert workers_for(runner.workers, control.max_rss_bytes, small) >= 1000
    assert workers_for(12, control.max_rss_bytes, small) == 12  # a number set stays that


def _vm_rss() -> int:
    with open("/proc/self/status") as f:
        return int(next(x for x in f if x.startswith("VmRSS:")).split()[1]) * 1024


def _own_stack_size() -> int:
    """The calling thread's stack size, as glibc set it up."""
    libc = ctypes.CDLL(None)
    libc.pthread_self.restype = ctypes.c_ulong
    libc.pthread_getattr_np.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    attr = ctypes.create_string_buffer(256)  # pthread_attr_t is 56 bytes on x86-64
    assert libc.pthread_getattr_np(libc.pthread_self(), attr) == 0
    size = ctypes.c_size_t()
    libc.pthread_attr_getstacksize(attr, ctypes.byref(size))
    libc.pthread_attr_destroy(attr)
    return size.value


async def test_memory_per_waiting_run_is_bounded() -> None:
    """400 runs parked (as on a model's socket): resident memory grows by far less than the
    sizing rule's `RUN_BYTES` a run, and each thread has the stack size set, not 8 MB."""
    n = 400
    pool = AgentPool(n)
    gate = threading.Event()
    started = threading.Semaphore(0)

    def park() -> int:
        started.release()
        gate.wait(30)
        return _own_stack_size()

    rss = _vm_rss()
    try:
        futures = [pool.submit(park) for _ in range(n)]
        for _ in range(n):
            await asyncio.to_thread(started.acquire, True, 30)
        rss_per_run = (_vm_rss() - rss) / n
        gate.set()
        stacks = set(await asyncio.wait_for(asyncio.gather(*futures), 30))
    finally:
        gate.set()
        await asyncio.to_thread(pool.shutdown)
    assert rss_per_run < RUN_BYTES / 2, rss_per_run
    assert stacks == {STACK_BYTES}


async def test_hundreds_of_runs_wait_on_their_model_at_once() -> None:
    """300 runs that each return only once all 300 are running: a pool of 8 would never."""
    n = 300
    pool = AgentPool(auto_workers(Machine(2 * GB, 4096), 512 * MB))
    barrier = threading.Barrier(n, timeout=30)
    try:
        futures = [pool.submit(barrier.wait) for _ in range(n)]
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        assert pool.peak_busy == n and pool.waiting == 0
    finally:
        await asyncio.to_thread(pool.shutdown)


class _Flow:
    """Runs that block until released, counting each tenant's runs going at once."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.waits: list[tuple[str, Wait]] = []

    def run(self, who: str) -> Callable[[], str]:
        def work() -> str:
            with self.lock:
                self.now[who] += 1
                self.peak[who] = max(self.peak[who], self.now[who])
            self.gate.wait(30)
            with self.lock:
                self.now[who] -= 1
            return who

        return work

    def told(self, who: str) -> Callable[[Wait], None]:
        return lambda wait: self.waits.append((who, wait))

    async def running(self, who: str, count: int) -> None:
        """Until ``count`` of ``who``'s runs are going at once (threads start on their own
        spawner thread, a moment after `submit`)."""
        for _ in range(1000):
            with self.lock:
                if self.now[who] == count:
                    return
            await asyncio.sleep(0.01)
        raise AssertionError(f"{who}: {self.now[who]} running, not {count}")


async def test_a_flooding_user_is_held_to_its_caps_and_others_start_at_once() -> None:
    pool = AgentPool(10, Fairness(user_running=2, user_waiting=3, chat_reserve=1))
    flow = _Flow()
    flood = Tenant("tg:666", "tg:-1")
    try:
        admitted, refused = [], []
        for _ in range(10):
            try:
                admitted.append(
                    pool.submit(flow.run("flood"), tenant=flood, on_wait=flow.told("flood"))
                )
            except PoolFull as exc:
                refused.append((exc.kind, exc.cap))
        assert (len(admitted), pool.busy, pool.waiting) == (5, 2, 3)
        assert refused == [("user", 3)] * 5
        # every waiting run of the flood was told why, at once
        assert [(who, w.reason) for who, w in flow.waits] == [("flood", "user")] * 3
        others = [
            pool.submit(
                flow.run(f"u{i}"), tenant=Tenant(f"tg:{i}", f"tg:{i}"), on_wait=flow.told("x")
            )
            for i in range(7)
        ]
        assert pool.busy == 9 and len(flow.waits) == 3  # none of the others waits
        await flow.running("flood", 2)
        flow.gate.set()
        assert sorted(await asyncio.wait_for(asyncio.gather(*admitted, *others), 30)) == sorted(
            ["flood"] * 5 + [f"u{i}" for i in range(7)]
        )
        assert flow.peak["flood"] == 2  # never more than its cap, though threads were free
    finally:
        flow.gate.set()
        await asyncio.to_thread(pool.shutdown)


async def test_a_flooding_chat_is_held_to_its_caps() -> None:
    pool = AgentPool(50, Fairness(chat_running=3, chat_waiting=2, chat_reserve=1))
    flow = _Flow()
    try:
        group = [Tenant(f"tg:{u}", "tg:-100") for u in range(8)]
        admitted, refused = [], []
        for tenant in group:
            try:
                admitted.append(
                    pool.submit(flow.run("group"), tenant=tenant, on_wait=flow.told("group"))
                )
            except PoolFull as exc:
                refused.append(exc.kind)
        assert (len(admitted), refused, pool.busy) == (5, ["chat"] * 3, 3)
        assert {w.reason for _, w in flow.waits} == {"chat"}
        alone = pool.submit(flow.run("dm"), tenant=Tenant("tg:9", "tg:9"))
        assert pool.busy == 4
        await flow.running("group", 3)
        flow.gate.set()
        await asyncio.wait_for(asyncio.gather(*admitted, alone), 30)
        assert flow.peak["group"] == 3
    finally:
        flow.gate.set()
        await asyncio.to_thread(pool.shutdown)


async def test_jobs_never_take_the_share_kept_for_chats() -> None:
    pool = AgentPool(4, Fairness(chat_reserve=1))
    flow = _Flow()
    try:
        jobs = [
            pool.submit(flow.run("job"), tenant=Tenant(job=True), on_wait=flow.told("job"))
            for _ in range(5)
        ]
        assert (pool.busy, pool.waiting) == (3, 2)
        assert [w.reason for _, w in flow.waits] == ["jobs", "jobs"]
        chat = pool.submit(
            flow.run("chat"), tenant=Tenant("tg:1", "tg:1"), on_wait=flow.told("chat")
        )
        assert pool.busy == 4 and len(flow.waits) == 2  # the chat message found room
        await flow.running("job", 3)
        flow.gate.set()
        await asyncio.wait_for(asyncio.gather(*jobs, chat), 30)
        assert flow.peak["job"] == 3
    finally:
        flow.gate.set()
        await asyncio.to_thread(pool.shutdown)


async def test_a_full_pool_makes_runs_wait_in_order_and_says_so() -> None:
    pool = AgentPool(2)
    flow = _Flow()
    try:
        runs = [
            pool.submit(flow.run(str(i)), tenant=Tenant(f"u{i}"), on_wait=flow.told(str(i)))
            for i in range(4)
        ]
        assert [(who, w.reason, w.ahead) for who, w in flow.waits] == [
            ("2", "pool", 0),
            ("3", "pool", 1),
        ]
        flow.gate.set()
        assert await asyncio.wait_for(asyncio.gather(*runs), 30) == ["0", "1", "2", "3"]
        assert pool.peak_busy == 2 and pool.snapshot()["waiting"] == 0
    finally:
        flow.gate.set()
        await asyncio.to_thread(pool.shutdown)


async def test_errors_reach_the_caller_and_context_is_carried() -> None:
    pool = AgentPool(2)

    def boom() -> None:
        raise ValueError("from the thread")

    try:
        with pytest.raises(ValueError, match="from the thread"):
            await pool.submit(boom)
        assert pool.busy == 0
    finally:
        await asyncio.to_thread(pool.shutdown)


async def test_a_burst_of_threads_ends_once_idle() -> None:
    pool = AgentPool(64, idle_s=0.2)
    gate = threading.Event()
    try:
        futures = [pool.submit(gate.wait, 10) for _ in range(40)]
        await asyncio.sleep(0.2)
        assert pool.snapshot()["threads"] == 40
        gate.set()
        await asyncio.gather(*futures)
        for _ in range(100):
            if pool.snapshot()["threads"] == 0:
                break
            await asyncio.sleep(0.05)
        assert pool.snapshot()["threads"] == 0
    finally:
        gate.set()
        await asyncio.to_thread(pool.shutdown)


async def test_a_pool_of_one_still_runs_a_job() -> None:
    """`hermes cron run` runs its job on a pool of one thread: no share to keep there."""
    pool = AgentPool(1)
    try:
        assert (
            await asyncio.wait_for(pool.submit(lambda: "ran", tenant=Tenant(job=True)), 10) == "ran"
        )
    finally:
        await asyncio.to_thread(pool.shutdown)


def test_the_caller_never_waits_for_a_thread_to_start() -> None:
    """`run` is called on the event loop: it hands the starting of threads to the spawner and
    returns at once, even while starting one is held up (here: the stack size lock is taken)."""
    threads = pool_module._Threads(STACK_BYTES, idle_s=1.0)
    done = threading.Semaphore(0)
    with pool_module._STACK_SIZE_LOCK:  # no thread can be started meanwhile
        caller = threading.Thread(
            target=lambda: [threads.run(done.release) for _ in range(50)], daemon=True
        )
        caller.start()
        caller.join(5)
        assert not caller.is_alive()  # all 50 handed over without a thread started
    for _ in range(50):  # then the spawner starts them, and every work runs
        assert done.acquire(timeout=10)
    threads.close()
