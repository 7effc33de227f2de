"""The cost of one ordinary `search_files` call (Python grep, ripgrep, glob listing): median
wall time and CPU (this process and its children) per call. ``python -m
tests.hostile.measure_search [N]``; for an older tree, run it with ``PYTHONPATH=<that tree>``.

``python -m tests.hostile.measure_search compile [STOP_S]``: 4 parallel calls, each with its
own 10,000-character pattern of Unicode classes (seconds of CPU to compile), stopped after
STOP_S (default 3): the CPU of this process (the one running the tool, as the gateway does)
and of its children, and how long the calls took to end after the stop."""

from __future__ import annotations

import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from tools import ToolContext
from tools.errors import ToolError
from tools.search_files import SearchFilesTool


def tree(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"pkg{i % 10}"
        d.mkdir(exist_ok=True)
        body = "".join(f"line {j} of file {i}\n" for j in range(50))
        (d / f"mod{i}.py").write_text(body + ("def handler_x():\n" if i % 7 == 0 else ""))


def cpu() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(
    tool: SearchFilesTool, ctx: ToolContext, args: dict[str, object], n: int
) -> tuple[float, float]:
    parsed = tool.Args.model_validate(args)
    tool.call(parsed, ctx)  # warm
    samples = []
    used = cpu()
    for _ in range(n):
        t = time.perf_counter()
        tool.call(parsed, ctx)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000, (cpu() - used) / n * 1000


def costly(i: int) -> str:
    """1,998 Unicode classes and a look-ahead (10,000 characters), distinct per ``i`` so that
    no compile cache helps; ripgrep refuses the look-ahead, so Python compiles it."""
    return "".join(f"[{chr(0x100 + i)}-\uffff]" for _ in range(1998))


def compile_bomb(stop_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "a.txt").write_text("hello\n")
        stop = threading.Event()
        ctx = ToolContext(workspace=ws, should_stop=stop.is_set)
        tool = SearchFilesTool(shutil.which("rg"), timeout_s=120)
        ended: list[float] = []

        def one(i: int) -> None:
            try:
                tool.call(tool.Args.model_validate({"pattern": costly(i) + "(?=x)"}), ctx)
            except ToolError:
                pass
            ended.append(time.monotonic())

        me = resource.getrusage(resource.RUSAGE_SELF)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(stop_s)
        burned = children_cpu()  # killed in a namespace, they are never counted as reaped
        stop.set()
        stopped = time.monotonic()
        for t in threads:
            t.join()
        after = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(1)  # a namespace's processes die a moment after their first
        left = children_cpu()
    own = after.ru_utime + after.ru_stime - me.ru_utime - me.ru_stime
    print(f"4 calls stopped after {stop_s:g} s: this process {own:.2f} s CPU, its children "
          f"{burned:.2f} s by the stop; the last call ended {max(ended) - stopped:.2f} s after "
          f"it; children's CPU 1 s later: {left:.2f} s")  # fmt: skip


def children_cpu() -> float:
    """CPU seconds of this process's live descendants."""
    total = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            total += sum(proc.cpu_times()[:2])
        except psutil.Error:
            continue
    return total


def main() -> None:
    if sys.argv[1:2] == ["compile"]:
        compile_bomb(float(sys.argv[2]) if len(sys.argv) > 2 else 3.0)
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        tree(ws, 200)
        ctx = ToolContext(workspace=ws)
        rg = shutil.which("rg")
        cases: list[tuple[str, SearchFilesTool, dict[str, object]]]
        cases = [("python grep", SearchFilesTool(None), {"pattern": r"def \w+_x"})]
        if rg:
            cases.append(("ripgrep", SearchFilesTool(rg), {"pattern": r"def \w+_x"}))
        cases.append(("glob list", SearchFilesTool(None), {"glob": "*.py"}))
        for name, tool, args in cases:
            wall, used = timed(tool, ctx, args, n)
            print(f"{name:12s} wall median {wall:7.1f} ms  cpu {used:6.1f} ms/call  ({n} runs)")


if __name__ == "__main__":
    main()
