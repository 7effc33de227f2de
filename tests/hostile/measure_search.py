"""The cost of one ordinary `search_files` call (Python grep, ripgrep, glob listing): median
wall time and CPU (this process and its children) per call. ``python -m
tests.hostile.measure_search [N]``; for an older tree, run it with ``PYTHONPATH=<that tree>``."""

from __future__ import annotations

import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tools import ToolContext
from tools.search import SearchFilesTool


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


def main() -> None:
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
