"""One bench run: start the fakes, run every phase on both sides, return the results.

Each side gets its own fake Bot API process, so both systems can stay up and the two sides'
runs are interleaved (gateway, floor, then floor, gateway, ...): load from other processes on
the machine then lands on both alike, which keeps the ratios honest. The fake LLM is shared;
only one side is driven at a time. With a baseline (another checkout's gateway) there are three
sides, interleaved the same way, all driven by this checkout's harness.
"""

from __future__ import annotations

import compileall
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import phases, report
from bench.plan import Plan
from bench.procs import ROOT, Child, start_fake
from bench.profile import Profiler
from bench.side import Side

LAG_INTERVAL_MS = 20  # the gateway's watchdog sampling period during the bench (README)
Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


PACKAGES = ("hermes_gateway", "adapters", "agent_core", "tools", "bench", "tests")


def _byte_compile(root: Path) -> None:
    """Write the checkout's bytecode, as `pip install` does for an installed gateway: with
    PYTHONDONTWRITEBYTECODE set (as in some shells and CI images) every start would compile
    the modules changed since the last cache, timing the compiler rather than the start, and
    more so on the side whose files changed last."""
    for package in PACKAGES:
        if (root / package).is_dir():
            compileall.compile_dir(root / package, quiet=2)


async def run(
    plan: Plan,
    *,
    workdir: Path | None = None,
    profile_dir: Path | None = None,
    progress: Progress = _stderr,
    baseline: Path | None = None,
) -> dict[str, Any]:
    """The whole bench; returns the JSON-able results (see `report.build`). ``baseline``: a
    checkout of another revision, whose gateway is measured too (`report.vs_baseline`)."""
    started = time.monotonic()
    # each side's kind -> the checkout its code comes from
    roots = {"gateway": ROOT, "floor": ROOT} | ({"baseline": baseline} if baseline else {})
    for root in set(roots.values()):
        _byte_compile(root)
    with _workdir(workdir) as wd:
        children: list[Child] = []
        try:
            llm_child, llm = start_fake(wd, "openai", "fake-openai")
            children.append(llm_child)
            urls = {}
            for kind in roots:
                child, urls[kind] = start_fake(wd, "telegram", f"fake-telegram-{kind}")
                children.append(child)
            async with contextlib.AsyncExitStack() as stack:
                sides = {
                    kind: await stack.enter_async_context(
                        Side(kind, wd, urls[kind], llm, plan, LAG_INTERVAL_MS, root)
                    )
                    for kind, root in roots.items()
                }
                clock = _Clock(started, progress)
                profiler = Profiler(profile_dir) if profile_dir is not None else None
                await _phases(plan, list(sides.values()), clock, profiler)
                return report.build(
                    plan,
                    sides["gateway"],
                    sides["floor"],
                    elapsed=time.monotonic() - started,
                    profiler=profiler,
                    baseline=sides.get("baseline"),
                )
        finally:
            for child in reversed(children):
                child.stop()


class _Clock:
    def __init__(self, started: float, progress: Progress) -> None:
        self.started = started
        self.progress = progress

    def say(self, side: Side, what: str) -> None:
        self.progress(f"[{time.monotonic() - self.started:6.1f}s] {side.kind:7} {what}")


def _order(sides: list[Side], rep: int) -> list[Side]:
    """Alternate which side goes first, so drift in machine load hits every side alike."""
    return sides if rep % 2 == 0 else list(reversed(sides))


async def _phases(plan: Plan, sides: list[Side], clock: _Clock, profiler: Profiler | None) -> None:
    [floor] = [side for side in sides if side.kind == "floor"]
    clock.say(floor, "harness ceiling: an echo bot on this side's fake")
    await phases.harness_ceiling(floor)
    for rep in range(plan.cold_reps):
        for side in _order(sides, rep):
            clock.say(side, f"cold start {rep + 1}/{plan.cold_reps}")
            await phases.cold_start(side, keep=rep == plan.cold_reps - 1)
    for side in sides:
        await phases.first_message(side)
    for side in sides:
        await phases.idle_cpu(side)
    chats: dict[str, int] = {}
    for rep in range(plan.latency_reps):
        for side in _order(sides, rep):
            clock.say(side, f"latency, 1 session x {plan.sequential} ({rep + 1})")
            async with _profiled(profiler, side, "sequential", rep):
                chats[side.kind] = await phases.latency(side)
    for side in sides:
        clock.say(side, f"history: {plan.sequential} turns against 1")
        await phases.history(side, chats[side.kind])
    for sessions, per_session in plan.throughput.items():
        for rep in range(plan.throughput_reps):
            for side in _order(sides, rep):
                clock.say(side, f"throughput, {sessions} sessions x {per_session} ({rep + 1})")
                async with _profiled(profiler, side, f"sessions-{sessions}", rep):
                    await phases.throughput(side, sessions, per_session)
    for rep in range(plan.slow_reps):
        for side in _order(sides, rep):
            clock.say(side, f"{plan.slow_delay_s * 1000:g} ms model, {plan.slow_sessions} x 1")
            await phases.slow_model(side)
    for side in sides:
        await side.stop()
    for side in sides:
        small, large = plan.memory_sessions
        clock.say(side, f"memory: {small} then {large} sessions (fresh instance)")
        await phases.memory(side)


@contextlib.asynccontextmanager
async def _profiled(profiler: Profiler | None, side: Side, name: str, rep: int) -> Any:
    """py-spy during the first run of the sequential and 100-session phases, when asked (on
    this checkout's gateway and the floor)."""
    skip = side.kind == "baseline" or name not in ("sequential", "sessions-100")
    if profiler is None or rep > 0 or skip:
        yield
        return
    async with profiler.record(side.running().child.pid, f"{side.kind}-{name}"):
        yield


@contextlib.contextmanager
def _workdir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as tmp:
        yield Path(tmp)
