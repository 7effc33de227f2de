"""``--profile DIR``: py-spy on both sides during the sequential and 100-session phases, and a
summary of where their CPU goes (by thread role, activity, package, function).

py-spy is a dev tool (``pip install py-spy``), not a dependency; sampling perturbs the figures
of the phases it watches, so profile in a separate run from the one you quote.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.procs import ROOT, BenchError

RATE_HZ = 200
PROJECT = ("hermes_gateway/", "adapters/", "agent_core/", "tools/")
# A sample's thread role, from the frames it holds (py-spy's raw format has no thread names).
ROLES = (
    ("pool worker (agent runs)", ("concurrent/futures/thread.py",)),
    ("watchdog thread", ("hermes_gateway/liveness/watchdog.py",)),
    ("sqlite thread", ("aiosqlite/core.py",)),
    ("other thread", ("threading.py",)),
)
# What a sample's work was for: the first row whose marker is anywhere in its stack. Rows
# name the gateway's modules and the floor's two functions; py-spy sometimes loses the
# bottom of a stack under uvloop, hence the catch-all rows for the SDKs' own frames.
ACTIVITIES = (
    ("store (SQLAlchemy + aiosqlite)", ("hermes_gateway/store", "aiosqlite/", "sqlalchemy/")),
    ("model call (openai SDK, pool thread)", ("agent_core/llm.py", "complete (bench/floor.py")),
    ("agent loop (pool thread)", ("agent_core/", "hermes_gateway/core/pool.py")),
    ("typing indicator (sendChatAction)", ("hermes_gateway/platforms/indicator.py",)),
    (
        "reply delivery (sendMessage)",
        ("hermes_gateway/core/delivery.py", "telegram_delivery.py", "on_text (bench/floor.py"),
    ),
    # before polling: the gateway's poller calls intake (the floor's intake is PTB's dispatch)
    ("intake (normalize, access, submit)", ("TelegramAdapter._take", "hermes_gateway/server.py")),
    (
        "long polling (getUpdates)",
        ("telegram/ext/_updater.py", "telegram_transport.py", "telegram_poller.py"),
    ),
    ("runner bookkeeping", ("hermes_gateway/core/runner.py", "hermes_gateway/core/bus.py")),
    ("watchdog", ("hermes_gateway/liveness/watchdog.py",)),
    ("control API (/metrics)", ("hermes_gateway/control/app.py",)),
    ("logging", ("structlog/", "logging/")),
    ("PTB dispatch (caller not sampled)", ("telegram/",)),
    ("HTTP stack (caller not sampled)", ("httpx/", "httpcore/", "h11/", "anyio/")),
)
CROSS_CUTTING = (
    ("logging (structlog + logging)", ("structlog/", "logging/", "hermes_gateway/logs/")),
    ("PTB objects (de_json, TelegramObject)", ("telegram/_",)),
    ("httpx/httpcore/h11/anyio (HTTP of both SDKs)", ("httpx/", "httpcore/", "h11/", "anyio/")),
    ("markup rendering", ("hermes_gateway/markup",)),
    ("prometheus_client", ("prometheus_client/",)),
)


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise BenchError("--profile needs py-spy: pip install py-spy")
    return found


class Profiler:
    def __init__(self, outdir: Path) -> None:
        self.outdir = outdir
        try:
            outdir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BenchError(f"--profile {outdir}: {exc.strerror}") from None
        self.exe = py_spy()
        self.summaries: dict[str, dict[str, Any]] = {}

    @contextlib.asynccontextmanager
    async def record(self, pid: int, name: str) -> AsyncIterator[None]:
        raw = self.outdir / f"{name}.txt"
        log = (self.outdir / f"{name}.py-spy.log").open("wb")
        argv = [self.exe, "record", "-p", str(pid), "-o", str(raw), "--format", "raw"]
        # --gil: only the thread holding the GIL, i.e. where Python CPU goes (threads waiting
        # on a queue or the GIL would otherwise show as busy); -F: one row per function
        argv += ["-r", str(RATE_HZ), "--gil", "-F", "--full-filenames"]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL
        )
        await asyncio.sleep(0.5)  # attached by now
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            log.close()
        if raw.exists() and raw.stat().st_size:
            self.summaries[name] = summarize(raw)


def _frames(path: Path) -> list[tuple[list[str], int]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out.append(([_short(f) for f in stack.split(";")], int(count)))
    return out


def _short(frame: str) -> str:
    """``func (/abs/…/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    name, _, where = frame.rpartition(" (")
    if not name:
        return frame
    for marker in ("/site-packages/", f"{ROOT}/", "/lib/python3."):
        if marker in where:
            where = where.split(marker, 1)[1]
            if marker == "/lib/python3.":
                where = where.partition("/")[2]
            break
    return f"{name} ({where}"


def _package(frame: str) -> str:
    """``func (pkg/mod.py:12)`` -> ``pkg``."""
    where = frame.rpartition("(")[2].rstrip(")")
    path = where.rpartition(":")[0] or where
    return path.split("/")[0].removesuffix(".py") or "?"


def _first(frames: list[str], table: tuple[tuple[str, tuple[str, ...]], ...], default: str) -> str:
    for label, markers in table:
        if any(m in f for f in frames for m in markers):
            return label
    return default


def summarize(path: Path, top: int = 20) -> dict[str, Any]:
    """Shares (%) of the samples holding the GIL: by thread role, by activity (what the
    work was for), by package of the running frame, by function (self), and by project
    function (inclusive); plus cross-cutting costs (logging, metrics, markup)."""
    stacks = _frames(path)
    total = sum(n for _, n in stacks) or 1
    counters: dict[str, Counter[str]] = {
        k: Counter() for k in ("roles", "activities", "packages", "self", "inclusive")
    }
    across: Counter[str] = Counter()
    for frames, n in stacks:
        counters["roles"][_first(frames, ROLES, "event loop thread")] += n
        counters["activities"][_first(frames, ACTIVITIES, "other (event loop, asyncio, ...)")] += n
        counters["packages"][_package(frames[-1])] += n
        counters["self"][frames[-1]] += n
        for frame in set(frames):
            if any(f"({p}" in frame for p in PROJECT):
                counters["inclusive"][frame] += n
        for label, markers in CROSS_CUTTING:
            if any(m in f for f in frames for m in markers):
                across[label] += n

    def shares(counter: Counter[str], k: int) -> list[list[Any]]:
        return [[name, round(100 * n / total, 1)] for name, n in counter.most_common(k)]

    return {
        "samples": total,
        "raw": str(path),
        "roles": shares(counters["roles"], 10),
        "activities": shares(counters["activities"], len(ACTIVITIES) + 1),
        "cross_cutting": shares(across, 10),
        "packages": shares(counters["packages"], top),
        "self": shares(counters["self"], top),
        "project_inclusive": shares(counters["inclusive"], top + 10),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.profile RAW``: print the summary of a raw py-spy file."""
    import json

    args = argv if argv is not None else sys.argv[1:]
    for name in args:
        print(json.dumps(summarize(Path(name)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
