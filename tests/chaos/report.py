"""One command for the reliability evidence: runs the chaos, fault, fuzz, soak and security
suites (the slow variants too) and prints the figures as tables.

    python -m tests.chaos.report                     # everything: about 20 minutes
    python -m tests.chaos.report --quick             # the CI variants only: about a minute
    python -m tests.chaos.report --rounds 100 --soak-seconds 1800 --soak-rate 30

Like `scripts/test`, it runs inside a loopback-only network namespace when it can. Exit code:
pytest's."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.chaos.kit import RESULTS_ENV

SUITES = ["tests/chaos", "tests/fuzz", "tests/soak", "tests/security"]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="hermes-reliability-"))
    env = dict(os.environ)
    env[RESULTS_ENV] = str(out)
    env["HERMES_CHAOS_ROUNDS"] = str(args.rounds)
    env["HERMES_SOAK_SECONDS"] = str(args.soak_seconds)
    env["HERMES_SOAK_RATE"] = str(args.soak_rate)
    env["HERMES_FUZZ_EXAMPLES"] = str(args.fuzz_examples)
    marks = "not slow" if args.quick else "slow or not slow"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marks]
    cmd += [*SUITES, *args.pytest_args]
    if not args.no_netns and shutil.which("unshare") and shutil.which("ip"):
        cmd = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *cmd]
    print("$", " ".join(cmd), flush=True)
    code = subprocess.call(cmd, env=env, cwd=Path(__file__).resolve().parents[2])
    print(render(load(out)))
    print(f"pytest exit code: {code}; figures in {out}")
    return code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.chaos.report", description=__doc__)
    p.add_argument("--quick", action="store_true", help="only the CI variants")
    p.add_argument("--rounds", type=int, default=60, help="SIGKILL rounds (default 60)")
    p.add_argument("--soak-seconds", type=float, default=600, help="soak length (default 600)")
    p.add_argument("--soak-rate", type=float, default=20, help="messages/s (default 20)")
    p.add_argument("--fuzz-examples", type=int, default=2000, help="per property (default 2000)")
    p.add_argument("--no-netns", action="store_true", help="do not isolate the network")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    return p


def load(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


def table(title: str, head: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return ""
    cells = [[str(c) for c in row] for row in [head, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    fmt = [
        ("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        for r in cells
    ]
    return "\n".join([f"\n{title}", line, fmt[0], line, *fmt[1:], line])


def render(results: dict[str, dict[str, Any]]) -> str:
    parts = [_crash(results), _soak(results)]
    parts.append(
        _rows(
            results,
            "model_fault_",
            "Model faults",
            ["fault", "kind", "told", "seconds", "next_message"],
        )
    )
    parts.append(
        _rows(results, "platform_", "Platform faults", ["fault", "readyz", "answered", "seconds"])
    )
    parts.append(
        _rows(
            results,
            "loop_",
            "Event loop and workers",
            [
                "fault",
                "exit_code",
                "exited_after_s",
                "session_free_after_s",
                "abandoned_threads",
                "answered_after_restart",
            ],
        )
    )
    parts.append(
        _rows(
            results,
            "store_",
            "Store faults",
            [
                "fault",
                "answered_during",
                "answered_after_s",
                "next_answer_after_s",
                "errors_logged",
                "half_written_turns",
            ],
        )
    )
    return "\n".join(p for p in parts if p)


def _rows(results: dict[str, dict[str, Any]], prefix: str, title: str, keys: list[str]) -> str:
    picked = [v for k, v in results.items() if k.startswith(prefix)]
    used = [k for k in keys if any(k in v for v in picked)]
    rows = [[_fmt(v.get(k, "")) for k in used] for v in picked]
    return table(title, used, rows)


def _fmt(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def _crash(results: dict[str, dict[str, Any]]) -> str:
    c = results.get("crash")
    w = results.get("double_window")
    rows: list[list[Any]] = []
    if c:
        rows += [
            ["SIGKILLs (by moment)", f"{c['kills']} ({_fmt_dict(c['kills_by_mode'])})"],
            ["messages sent / in the inbox", f"{c['sent']} / {c['accepted']}"],
            ["answered exactly once", c["answered_once"]],
            ["answered twice", f"{c['answered_twice']} ({_fmt_dict(c['doubled_by_kill_mode'])})"],
            ["never answered", c["never_answered"]],
            ["apologies / misrouted", f"{c['error_replies']} / {c['misrouted']}"],
            ["kills aimed at a reply Telegram took", _send(c["send_kills"])],
            ["answer latency p50 / p99 (s)", f"{c['latency_p50_s']} / {c['latency_p99_s']}"],
        ]
    if w:
        rows.append(
            [
                "double window: Telegram's OK -> 'answered' committed (ms)",
                f"p50 {w['window_p50_ms']}, p99 {w['window_p99_ms']}, max {w['window_max_ms']}"
                f" ({w['answers']} answers)",
            ]
        )
    return table("Crash chaos (SIGKILL and restart)", ["figure", "value"], rows)


def _send(s: dict[str, Any]) -> str:
    return (
        f"{s['aimed']} aimed, {s['doubled']} doubled; latest doubling kill "
        f"{s['latest_doubling_kill_ms']} ms after the OK, earliest harmless one "
        f"{s['earliest_harmless_kill_ms']} ms"
    )


def _fmt_dict(d: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"


def _soak(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name in ("soak", "soak_short"):
        s = results.get(name)
        if not s or "rss_start_mb" not in s:
            continue
        rows.append(
            [
                f"{s['seconds']:g} s at {s['rate_per_s']:g}/s",
                f"{s['sent']} ({s['answered_once']} once, {s['answered_twice']} twice, "
                f"{s['never_answered']} never)",
                f"{s['rss_start_mb']} -> {s['rss_end_mb']} ({s['rss_growth_pct']:+}%)",
                f"{s['fds_start']:g} -> {s['fds_end']:g}",
                f"{s['threads_start']:g} -> {s['threads_end']:g}",
                s["lag_p99_ms_max"],
                f"{s['latency_p50_ms']} / {s['latency_p99_ms']}",
            ]
        )
    head = [
        "run",
        "messages",
        "RSS MB after warm-up",
        "fds",
        "threads",
        "loop lag p99 max ms",
        "latency p50/p99 ms",
    ]
    return table("Soak", head, rows)


if __name__ == "__main__":
    sys.exit(main())
