"""The control server's view of its own memory: RSS as the kernel counts it, a ceiling that
can be switched off, and the C heap trimmed off the loop once enough bodies were let go."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import psutil
import pytest

from hermes_gateway.control.rss import TRIM_AFTER_BYTES, MemoryGauge, rss_bytes


def test_rss_is_what_the_kernel_counts() -> None:
    ours = rss_bytes()
    assert ours is not None
    assert abs(ours - psutil.Process().memory_info().rss) < 64 * 1024 * 1024


async def test_the_ceiling_and_its_absence() -> None:
    assert MemoryGauge(1).over()
    assert not MemoryGauge(0).over()
    assert not MemoryGauge(1 << 50).over()


async def test_freed_bodies_are_trimmed_once_after_the_burst() -> None:
    gauge = MemoryGauge(0)
    gauge.freed(TRIM_AFTER_BYTES // 2)
    assert gauge._pending is None  # not worth a trim yet
    for _ in range(3):
        gauge.freed(TRIM_AFTER_BYTES)
    pending = gauge._pending
    assert pending is not None  # one trim for the whole burst
    await asyncio.wait_for(pending, 10)
    assert gauge._pending is None and gauge._freed == 0
    await gauge.close()


def test_the_gauge_finds_malloc_trim_without_a_child_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It is built on the event loop with the gateway: looking libc up must not run a program
    (`ctypes.util.find_library` runs `ldconfig -p`)."""

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a child process: {args[1:2]}")

    monkeypatch.setattr(subprocess.Popen, "__init__", refused)
    assert MemoryGauge(0)._trim is not None  # glibc here
