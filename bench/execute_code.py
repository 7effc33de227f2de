"""What `execute_code` costs against the calls it replaces, in one run:
``python -m bench.execute_code [-n N] [--runs R]``.

- start: an empty script, against `terminal` running ``true`` (both spawn one sandboxed child);
- calls: one script making N `read_file` calls, against N direct registry dispatches (what the
  model's own calls cost the gateway, model round trips left out);
- fan-out: the same N calls from 8 script threads.

Figures are medians over R runs and are printed as ratios to their alternative; they are never
asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.catalog import CodeSettings, TerminalSettings, ToolSettings, build_registry
from tools.registry import ToolContext, ToolRegistry

_SEQUENTIAL = "from hermes_tools import read_file\nfor _ in range({n}):\n    read_file('a.txt')\n"
_FANNED = (
    "from concurrent.futures import ThreadPoolExecutor\nfrom hermes_tools import read_file\n"
    "with ThreadPoolExecutor(8) as pool:\n    list(pool.map(read_file, ['a.txt'] * {n}))\n"
)


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _script(registry: ToolRegistry, ctx: ToolContext, code: str) -> None:
    outcome = registry.dispatch("execute_code", json.dumps({"code": code}), ctx)
    assert outcome.ok, outcome.content


def measure(n: int, runs: int) -> dict[str, float]:
    settings = ToolSettings(
        terminal=TerminalSettings(approval="off"), code=CodeSettings(max_calls=n)
    )
    registry = build_registry(["read_file", "terminal", "execute_code"], settings)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = ToolContext(workspace=Path(tmp))
        (ctx.workspace / "a.txt").write_text("a line\n" * 100)
        direct = json.dumps({"path": "a.txt"})
        figures = {
            "start_script_ms": _median_ms(lambda: _script(registry, ctx, "pass"), runs),
            "start_terminal_ms": _median_ms(
                lambda: registry.dispatch("terminal", '{"command": "true"}', ctx), runs
            ),
            "calls_script_ms": _median_ms(
                lambda: _script(registry, ctx, _SEQUENTIAL.format(n=n)), runs
            ),
            "calls_direct_ms": _median_ms(
                lambda: [registry.dispatch("read_file", direct, ctx) for _ in range(n)], runs
            ),
            "fanout_script_ms": _median_ms(
                lambda: _script(registry, ctx, _FANNED.format(n=n)), runs
            ),
        }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100, help="tool calls per script")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    f = measure(args.n, args.runs)
    per_call = (f["calls_script_ms"] - f["start_script_ms"]) / args.n
    print(f"| what | ms (median of {args.runs}) | ratio |")
    print("|---|---|---|")
    print(
        f"| empty script vs terminal `true` | {f['start_script_ms']:.1f} vs "
        f"{f['start_terminal_ms']:.1f} | {f['start_script_ms'] / f['start_terminal_ms']:.2f} |"
    )
    print(
        f"| {args.n} read_file from a script vs direct | {f['calls_script_ms']:.1f} vs "
        f"{f['calls_direct_ms']:.1f} | {f['calls_script_ms'] / f['calls_direct_ms']:.2f} |"
    )
    print(
        f"| the same from 8 threads | {f['fanout_script_ms']:.1f} | "
        f"{f['fanout_script_ms'] / f['calls_script_ms']:.2f} of sequential |"
    )
    print(f"| one call through the socket, start excluded | {per_call:.2f} | |")


if __name__ == "__main__":
    main()
