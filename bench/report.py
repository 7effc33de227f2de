"""The results of a run: the bench's JSON document and its Markdown table.

``ratios`` are gateway / floor (floor / gateway for throughput), so lower is better
everywhere and 1.0 means "as cheap as the floor". With a baseline (``--baseline``: another
checkout's gateway, measured in the same run), ``baseline_ratios`` are its own, and
``vs_baseline`` divides each ratio by the baseline's: above 1.0, this checkout costs more.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import lag, phases
from bench.plan import Plan
from bench.procs import ROOT, WORKERS

if TYPE_CHECKING:
    from bench.profile import Profiler
    from bench.side import Side

RATIO_TARGET = 1.5
CODE = ("hermes_gateway", "adapters", "agent_core", "tools")  # what "dirty" is about
# ratio name -> (figure, inverted): inverted ones are floor / gateway
RATIOS = {
    "latency_p50": ("latency_p50_ms", False),
    "latency_p99": ("latency_p99_ms", False),
    "throughput_100": ("throughput_100", True),
    "cold_start": ("cold_start_s", False),
    "rss_idle": ("rss_idle_mb", False),
    "cpu_per_msg": ("cpu_per_msg_ms", False),
}
# shown beside the figures, not targets
INFO_RATIOS = {"rss_warm": ("rss_warm_mb", False)}


def side_figures(side: Side) -> dict[str, Any]:
    figures = phases.medians(side)
    figures.update({k: v for k, v in side.figures.items() if k != "loop_lag_buckets"})
    figures["lost"] = sum(side.lost.values())
    figures["lost_by_phase"] = dict(side.lost)
    figures["unsent"] = sum(side.unsent.values())
    figures["stray_replies"] = side.driver.stray
    return dict(sorted(figures.items()))


def _ratio(gateway: Any, floor: Any, inverted: bool) -> float | None:
    if not isinstance(gateway, int | float) or not isinstance(floor, int | float):
        return None
    num, den = (floor, gateway) if inverted else (gateway, floor)
    return round(num / den, 3) if den else None


def ratios_of(
    g: dict[str, Any], f: dict[str, Any], which: dict[str, tuple[str, bool]]
) -> dict[str, float | None]:
    return {name: _ratio(g.get(key), f.get(key), inv) for name, (key, inv) in which.items()}


def vs_baseline(ratios: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """Each ratio of this checkout ÷ the baseline's (both against the same floor)."""
    out: dict[str, float | None] = {}
    for name, value in ratios.items():
        other = base.get(name)
        ok = isinstance(value, int | float) and isinstance(other, int | float) and other
        out[name] = round(value / other, 3) if ok else None
    return out


def build(
    plan: Plan,
    gateway: Side,
    floor: Side,
    *,
    elapsed: float,
    profiler: Profiler | None = None,
    baseline: Side | None = None,
) -> dict[str, Any]:
    g, f = side_figures(gateway), side_figures(floor)
    ratios, info = ratios_of(g, f, RATIOS), ratios_of(g, f, INFO_RATIOS)
    loop = lag.summary(gateway.figures.get("loop_lag_buckets") or {})
    data: dict[str, Any] = {
        "mode": plan.mode,
        "plan": plan.describe(),
        "plan_summary": plan.summary(),
        "machine": _machine(),
        "elapsed_s": round(elapsed, 1),
        "gateway": g,
        "floor": f,
        "ratios": ratios,
        "info_ratios": info,
        "loop_lag_p99_ms": loop["p99_ms"],
        "loop_lag": loop,
        "kb_per_session": g.get("kb_per_session"),
        "history_slope": g.get("history_slope"),
        "lost": g["lost"] + f["lost"],
        "harness_ceiling_msg_s": f.get("harness_ceiling_msg_s"),
    }
    if baseline is not None:
        b = side_figures(baseline)
        data["baseline"] = b
        data["baseline_commit"] = _commit(baseline.root)
        data["baseline_ratios"] = ratios_of(b, f, RATIOS)
        data["vs_baseline"] = vs_baseline(ratios, data["baseline_ratios"])
        data["lost"] += b["lost"]
    data["targets"] = targets(data)
    if profiler is not None:
        data["profile"] = _with_ms(profiler.summaries, g, f)
    return data


# profiled phase -> the figure whose first run it watched
PROFILED = {"sequential": "cpu_per_msg_ms", "sessions-100": "throughput_100_cpu_per_msg_ms"}


def _with_ms(
    summaries: dict[str, dict[str, Any]], g: dict[str, Any], f: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Each activity's share turned into ms per message: share x CPU per message of the run
    it watched (approximate: the samples only see Python holding the GIL)."""
    out = {}
    for name, summary in summaries.items():
        kind, _, phase = name.partition("-")
        figures = g if kind == "gateway" else f
        runs = figures.get(f"{PROFILED[phase]}_runs") or [figures.get(PROFILED[phase])]
        cpu = runs[0] if runs and isinstance(runs[0], int | float) else None
        summary = dict(summary, cpu_per_msg_ms=cpu)
        if cpu is not None:
            summary["activities_ms"] = [
                [label, share, round(share * cpu / 100, 2)]
                for label, share in summary["activities"]
            ]
        out[name] = summary
    return out


def _machine() -> dict[str, Any]:
    return {
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def _commit(root: Path = ROOT) -> str | None:
    """The checkout measured: HEAD, with ``+dirty`` when the gateway's code has edits."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "-uno", "--", *CODE],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return None
    return f"{head}+dirty" if head and dirty else head or None


def targets(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each bench target with the measured value and whether it is met."""
    out: dict[str, dict[str, Any]] = {}

    def check(name: str, value: Any, target: str, met: bool | None) -> None:
        out[name] = {"value": value, "target": target, "met": met}

    for name, value in data["ratios"].items():
        check(f"ratio.{name}", value, f"<= {RATIO_TARGET}", _le(value, RATIO_TARGET))
    loop = data["loop_lag"]
    met = _lt(data["loop_lag_p99_ms"], 20.0)
    check(
        "loop_lag_p99_ms",
        data["loop_lag_p99_ms"],
        "< 20",
        met if loop["decides_20ms_target"] else None,
    )
    check("kb_per_session", data["kb_per_session"], "<= 20", _le(data["kb_per_session"], 20.0))
    check("history_slope", data["history_slope"], "<= 1.5", _le(data["history_slope"], 1.5))
    check("lost", data["lost"], "== 0", data["lost"] == 0)
    for side in ("gateway", "floor"):
        runs = data[side].get("slow_peak_parallel_runs") or []
        wanted = f"== {WORKERS} (runner.workers) in every run"
        check(f"{side}.slow_peak_parallel", runs, wanted, bool(runs) and set(runs) == {WORKERS})
    return out


def _le(value: Any, bound: float) -> bool | None:
    return None if not isinstance(value, int | float) else value <= bound


def _lt(value: Any, bound: float) -> bool | None:
    return None if not isinstance(value, int | float) else value < bound


# -- Markdown -------------------------------------------------------------------------------

ROWS = [
    ("cold start (s): gateway to /healthz, floor to 1st getUpdates", "cold_start_s", "cold_start"),
    ("cold start to first getUpdates (s)", "first_poll_s", None),
    ("idle RSS after ready (MB)", "rss_idle_mb", "rss_idle"),
    ("idle RSS warm, after the first message (MB)", "rss_warm_mb", "rss_warm"),
    ("first message after start (ms)", "first_message_ms", None),
    ("idle CPU, warm (ms per s)", "idle_cpu_ms_per_s", None),
    ("latency p50, 1 session (ms)", "latency_p50_ms", "latency_p50"),
    ("latency p99, 1 session (ms)", "latency_p99_ms", "latency_p99"),
    ("CPU per message, 1 session (ms)", "cpu_per_msg_ms", "cpu_per_msg"),
    ("LLM requests per message", "llm_requests_per_msg", None),
    ("Bot API calls / getUpdates per message, 1 session", "bot_calls_per_msg", None),
    ("throughput, 1 session (msg/s)", "throughput_1", None),
    ("throughput, 10 sessions (msg/s)", "throughput_10", None),
    ("throughput, 100 sessions (msg/s)", "throughput_100", "throughput_100"),
    ("  latency p50 / p99 at 100 sessions (ms)", "throughput_100_latency_p50_ms", None),
    ("  CPU per message at 100 sessions (ms)", "throughput_100_cpu_per_msg_ms", None),
    ("  Bot API calls / getUpdates per message", "throughput_100_bot_calls_per_msg", None),
    ("slow model, N x 1: wall time (s)", "slow_wall_s", None),
    ("slow model: peak parallel model calls (each run)", "slow_peak_parallel", None),
    ("RSS after N1 / N2 sessions (MB)", "rss_after_sessions_mb", None),
    ("KB per session (slope N1 -> N2)", "kb_per_session", None),
    ("history: p50 at 1 turn / at N turns (ms)", "history_p50_1_ms", None),
    ("  messages in the model request at N turns", "history_llm_messages", None),
    ("history slope (p50 N turns / 1 turn)", "history_slope", None),
    ("lost messages", "lost", None),
]


def _cell(figures: dict[str, Any], key: str) -> str:
    value = figures.get(key)
    if key == "throughput_100_latency_p50_ms":
        return f"{_num(value)} / {_num(figures.get('throughput_100_latency_p99_ms'))}"
    if key.endswith("bot_calls_per_msg"):
        polls = figures.get(key.replace("bot_calls", "polls"))
        return f"{_num(value)} / {_num(polls)}"
    if key == "history_p50_1_ms":
        return f"{_num(value)} / {_num(figures.get('history_p50_deep_ms'))}"
    if isinstance(value, dict):
        return " / ".join(f"{_num(v)}" for v in value.values())
    if key == "lost" and figures.get("unsent"):
        return f"{_num(value)} (+ {figures['unsent']} never sent: deadline or wedged)"
    if key == "slow_peak_parallel":
        return " / ".join(_num(v) for v in figures.get("slow_peak_parallel_runs") or [value])
    return _num(value)


def _num(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, list):
        return " / ".join(_num(v) for v in value)
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _pct(part: Any, whole: Any) -> str:
    if not isinstance(part, int | float) or not isinstance(whole, int | float) or not whole:
        return "n/a"
    return f"{100 * part / whole:.0f} %"


def markdown(data: dict[str, Any]) -> str:
    f = data["floor"]
    against = f", baseline {data.get('baseline_commit')}" if "baseline" in data else ""
    lines = [
        f"Hermes Gateway bench ({data['mode']}, {data['elapsed_s']} s, "
        f"commit {data['machine']['commit']}{against})",
        "",
        f"Counts: {data['plan_summary']}.",
        "",
        *_figure_table(data),
    ]
    loop = data["loop_lag"]
    ceiling = data["harness_ceiling_msg_s"]
    lines += [
        "",
        f"Harness ceiling (an echo bot on raw aiohttp, {data['plan']['ceiling'][0]} sessions): "
        f"{_num(ceiling)} msg/s; the floor's 100-session throughput is "
        f"{_pct(f.get('throughput_100'), ceiling)} of it.",
        f"Loop lag p99 under the 100-session load: {_num(loop['p99_ms'])} ms "
        f"(bucket {loop['p99_bucket_ms']} ms, {loop['samples']} samples; "
        f"the buckets {'can' if loop['decides_20ms_target'] else 'cannot'} decide < 20 ms).",
        "",
        "| target | value | wanted | met |",
        "|---|---|---|---|",
    ]
    for name, t in data["targets"].items():
        met = {True: "yes", False: "**no**", None: "undecided"}[t["met"]]
        lines.append(f"| {name} | {_num(t['value'])} | {t['target']} | {met} |")
    for name, summary in (data.get("profile") or {}).items():
        lines += _profile_table(name, summary)
    return "\n".join(lines)


def _figure_table(data: dict[str, Any]) -> list[str]:
    """Each figure per side, with the ratios; with a baseline, its column, its ratios and
    this checkout's ratio ÷ the baseline's."""
    g, f, b = data["gateway"], data["floor"], data.get("baseline")
    ratios = {**data["ratios"], **data.get("info_ratios", {})}
    head = "| figure | gateway | floor | ratio (gateway ÷ floor; throughput: floor ÷ gateway) |"
    rule = "|---|---|---|---|"
    if b is not None:
        head += " baseline | baseline ratio | ratio ÷ baseline ratio |"
        rule += "---|---|---|"
    lines = [head, rule]
    for label, key, ratio in ROWS:
        row = f"| {label} | {_cell(g, key)} | {_cell(f, key)} | {_ratio_cell(ratios, ratio)} |"
        if b is not None:
            theirs = _ratio_cell(data["baseline_ratios"], ratio)
            row += f" {_cell(b, key)} | {theirs} | {_ratio_cell(data['vs_baseline'], ratio)} |"
        lines.append(row)
    return lines


def _ratio_cell(ratios: dict[str, Any], name: str | None) -> str:
    return _num(ratios.get(name)) if name in ratios else ""


def _profile_table(name: str, summary: dict[str, Any]) -> list[str]:
    rows = summary.get("activities_ms") or [[a, s, None] for a, s in summary["activities"]]
    lines = [
        "",
        f"Profile {name}: {summary['samples']} GIL samples, CPU/msg "
        f"{_num(summary.get('cpu_per_msg_ms'))} ms",
        "",
        "| activity | share % | ≈ ms/msg |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {share} | {_num(ms)} |" for label, share, ms in rows if share >= 0.5]
    return lines
