"""How many agent runs one process holds at once (`runner.workers: auto`): what the machine's
memory, the configured RSS ceiling and the open-file limit allow (docs/concurrency.md)."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hermes_gateway.core.pool import Fairness

if TYPE_CHECKING:
    from hermes_gateway.config import Config, RunnerConfig

# A run waiting on its model costs its thread's touched stack, its model connection (socket,
# TLS and HTTP buffers), its request, the streamed answer and its session's cached agent:
# measured at 90-110 KB by `python -m bench --only crowd` (peak RSS less idle RSS, ÷ the runs
# in flight), counted here with room for longer histories and answers.
RUN_BYTES = 256 * 1024
# The idle gateway with its imports and caches (about 110 MB) and headroom for the store's
# and the platforms' own buffers under load: what the runs' share of a ceiling leaves out.
BASE_BYTES = 160 * 1024 * 1024
MIN_WORKERS = 8  # the old fixed default: a small machine still runs that many at once
MAX_WORKERS = 2048  # beyond this the loop, not memory, is what a burst waits on
_FD_RESERVE = 64  # descriptors for the store, logs, tools and platform calls
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@dataclass(frozen=True, slots=True)
class Machine:
    """What the sizing reads of the machine: usable memory (the cgroup's limit if lower than
    the physical memory) and the soft open-file limit (None: unlimited)."""

    memory_bytes: int
    open_files: int | None


def machine() -> Machine:
    """This machine's `Machine` (reads /proc-like files: call it off the loop, or at start)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit():
            memory = min(memory, int(raw))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return Machine(memory, None if soft == resource.RLIM_INFINITY else soft)


def auto_workers(host: Machine, max_rss_bytes: int) -> int:
    """Runs at once: half the memory (and no more than a non-zero `control.max_rss_bytes`
    leaves over the idle process) at `RUN_BYTES` each, and one model connection each within
    half the open-file limit (the other half is the control server's); clamped to
    [`MIN_WORKERS`, `MAX_WORKERS`]."""
    budget = host.memory_bytes // 2
    if max_rss_bytes:
        budget = min(budget, max_rss_bytes - BASE_BYTES)
    fits = budget // RUN_BYTES
    if host.open_files is not None:
        fits = min(fits, host.open_files // 2 - _FD_RESERVE)
    return max(MIN_WORKERS, min(MAX_WORKERS, fits))


def workers_for(setting: int | None, max_rss_bytes: int, host: Machine | None = None) -> int:
    """`runner.workers` as a number: itself when set, else (`auto`) `auto_workers`."""
    if setting is not None:
        return setting
    return auto_workers(host or machine(), max_rss_bytes)


def pool_size(config: Config, host: Machine | None = None) -> int:
    """The agent pool's size for ``config`` (and the model client's connections)."""
    return workers_for(config.runner.workers, config.control.max_rss_bytes, host)


def fairness(runner: RunnerConfig, workers: int) -> Fairness:
    """The pool's caps from `runner.*`; a quarter of the threads (at least one) is kept from
    scheduled jobs, so a chat message always finds room."""
    return Fairness(
        user_running=runner.max_running_per_user,
        user_waiting=runner.max_waiting_per_user,
        chat_running=runner.max_running_per_chat,
        chat_waiting=runner.max_waiting_per_chat,
        chat_reserve=max(1, workers // 4),
    )
