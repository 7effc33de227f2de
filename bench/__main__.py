"""``python -m bench [--quick | --tiny] [--json PATH] [--profile DIR] [--baseline DIR]``: run
the bench, print the Markdown table, write the JSON (default ``bench/results/bench.json``).
``--only crowd``: only the crowd and fairness phases (`bench/crowd.py`, ``crowd.json``);
``--only traces``: what traces cost, on ÷ off (`bench/traces.py`, ``traces.json``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import uvloop

from bench import crowd, report, suite, traces
from bench.plan import Plan
from bench.procs import ROOT, BenchError

DEFAULT_JSON = ROOT / "bench" / "results" / "bench.json"  # git-ignored


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer runs, smaller counts (< 90 s)")
    size.add_argument("--tiny", action="store_true", help="smoke test: figures mean nothing")
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help="default bench/results/bench.json"
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy both sides (perturbs the figures); raw files go here"
    )
    parser.add_argument("--workdir", type=Path, help="keep configs, homes and logs here")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of another revision: its gateway is measured in the same run, by "
        "this checkout's fakes, floor and driver (e.g. `git worktree add DIR REV`)",
    )
    parser.add_argument(
        "--only",
        choices=["crowd", "traces"],
        help="crowd: only many conversations at once on a slow model, and the fairness case; "
        "traces: CPU per message and latency with traces on, divided by off",
    )
    args = parser.parse_args(argv)
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    if args.only is not None:
        phase = {"crowd": crowd, "traces": traces}[args.only]
        path = (
            args.json if args.json != DEFAULT_JSON else DEFAULT_JSON.with_name(f"{args.only}.json")
        )
        try:
            data = phase.main(mode, args.workdir, path)
        except BenchError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 1
        print(phase.markdown(data))
        print(f"\nJSON: {path}")
        return 0
    if args.baseline is not None and not (args.baseline / "hermes_gateway").is_dir():
        parser.error(f"--baseline {args.baseline}: no hermes_gateway package there")
    plan = Plan.named(mode)
    try:
        run = suite.run(
            plan,
            workdir=args.workdir,
            profile_dir=args.profile,
            baseline=args.baseline and args.baseline.resolve(),
        )
        data = uvloop.run(run)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=2) + "\n")
    print(report.markdown(data))
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
