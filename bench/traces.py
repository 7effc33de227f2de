"""`python -m bench --only traces`: what OpenTelemetry traces cost, in one run. Two gateways of
this checkout, one with traces off and one with every message traced (`sample_ratio: 1.0`)
exporting to a local collector (`bench.otlp_sink`), take the same loads in alternating runs:
a crowd of new sessions at once, then one session's messages one after another. CPU per
message and latency on, each divided by off (docs/traces.md)."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.driver import percentile
from bench.plan import Plan
from bench.procs import BenchError, Child, _module, start_fake
from bench.report import _commit, _machine
from bench.side import Side

LAG_INTERVAL_MS = 20
SIDES = ("off", "on")
EXPORTED_AFTER_S = 3.0  # past the SDK's default schedule delay: the last spans are out


@dataclass(frozen=True)
class TracesPlan:
    crowd: int  # sessions at once, one message each
    model_s: float  # the model's time per call
    sequential: int  # messages of one session, one after another
    reps: int  # runs of each load, per side


TRACES_PLANS = {
    "full": TracesPlan(200, 0.05, 100, 6),
    "quick": TracesPlan(100, 0.05, 20, 2),
    "tiny": TracesPlan(10, 0.02, 5, 1),
}


def _tune(endpoint: str | None) -> Callable[[dict[str, Any]], None]:
    def tune(config: dict[str, Any]) -> None:
        if endpoint is not None:  # a queue no load fills: every span is exported, and paid
            traces = {"enabled": True, "endpoint": endpoint, "sample_ratio": 1.0}
            config["observability"] = {"traces": {**traces, "queue_max": 65536}}

    return tune


def _start_sink(workdir: Path) -> tuple[Child, str]:
    child = Child("otlp-sink", _module("bench.otlp_sink"), workdir, stdout=True)
    line = child.read_line(20)
    if not line.startswith("READY "):
        child.stop()
        raise BenchError(f"otlp-sink said {line!r}, not READY")
    return child, line.removeprefix("READY ").strip()


async def run(mode: str, workdir: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    plan, load = Plan.named(mode), TRACES_PLANS[mode]
    started = time.monotonic()
    children: list[Child] = []
    try:
        llm_child, llm = start_fake(workdir, "openai", "fake-openai")
        children.append(llm_child)
        sink, endpoint = _start_sink(workdir)
        children.append(sink)
        urls = {}
        for kind in SIDES:
            child, urls[kind] = start_fake(workdir, "telegram", f"fake-telegram-{kind}")
            children.append(child)
        async with contextlib.AsyncExitStack() as stack:
            sides = {}
            for kind in SIDES:
                (workdir / kind).mkdir(exist_ok=True)  # each side's homes and logs
                tune = _tune(endpoint if kind == "on" else None)
                side = Side(
                    "gateway", workdir / kind, urls[kind], llm, plan, LAG_INTERVAL_MS, tune=tune
                )
                sides[kind] = await stack.enter_async_context(side)
                await side.start()
                [chat] = side.driver.new_chats(1)  # warm: a first message loads what answers
                side.account("warm-up", await side.driver.sequential(chat, 2, side.deadline()))
            out: dict[str, Any] = {
                "mode": mode,
                "plan": asdict(load),
                "crowd": {},
                "sequential": {},
            }
            for rep in range(load.reps):
                for kind in SIDES if rep % 2 == 0 else SIDES[::-1]:
                    side = sides[kind]
                    progress(f"[{time.monotonic() - started:6.1f}s] traces {kind} run {rep + 1}")
                    chats = side.driver.new_chats(load.crowd)
                    crowd = await _measure(side, "crowd", chats, 1, load.model_s)
                    out["crowd"].setdefault(kind, []).append(crowd)
                    chats = side.driver.new_chats(1)
                    one = await _measure(side, "sequential", chats, load.sequential, load.model_s)
                    out["sequential"].setdefault(kind, []).append(one)
            out["spans"] = await _spans(sides["on"])
        out["ratios"] = {phase: _ratios(out[phase]) for phase in ("crowd", "sequential")}
        out["elapsed_s"] = round(time.monotonic() - started, 1)
        out["machine"] = _machine()
        out["commit"] = _commit()
        return out
    finally:
        for child in reversed(children):
            child.stop()


async def _measure(
    side: Side, phase: str, chats: list[int], per_session: int, model_s: float
) -> dict[str, Any]:
    """``chats`` new sessions at once, ``per_session`` messages each in turn. The CPU is read
    once the spans of the load are exported too (both sides wait as long): the SDK exports
    every 2 s, so read at once it would bill this load's export to the next."""
    inst = side.running()
    await side.llm_reset(model_s)
    cpu = inst.cpu_s()
    done = side.account(phase, await side.driver.sessions(chats, per_session, side.deadline()))
    await asyncio.sleep(EXPORTED_AFTER_S)
    cpu = inst.cpu_s() - cpu
    await side.llm_reset(0.0)
    return {
        "answered": done.answered,
        "lost": done.lost + done.unsent,
        "latency_p50_ms": round(percentile(done.latencies, 0.5) * 1000, 1),
        "latency_p99_ms": round(percentile(done.latencies, 0.99) * 1000, 1),
        "cpu_per_msg_ms": round(cpu * 1000 / max(1, done.answered), 3),
    }


async def _spans(side: Side) -> dict[str, float]:
    """The traced side's span counts by outcome (/metrics): every span exported, none lost.
    Read after the last load's wait: its last batch has gone."""
    url = side.gateway_metrics_url()
    assert url is not None
    async with side.http.get(url) as resp:
        text = await resp.text()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("hermes_trace_spans_total{"):
            counts[line.split('"')[1]] = float(line.split()[-1])
    return counts


def _ratios(phase: dict[str, list[dict[str, Any]]]) -> dict[str, float | None]:
    """On ÷ off of each side's median, for CPU per message and latency."""
    ratios: dict[str, float | None] = {}
    for key in ("cpu_per_msg_ms", "latency_p50_ms", "latency_p99_ms"):
        off, on = (_median([r[key] for r in phase[kind]]) for kind in SIDES)
        ratios[key] = round(on / off, 3) if off and on is not None else None
    return ratios


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def markdown(data: dict[str, Any]) -> str:
    """One row per load and side (medians over the runs), and the ratios on ÷ off."""
    lines = [
        f"traces bench ({data['mode']}), commit {data.get('commit')}, {data['elapsed_s']} s",
        "",
        "| load | traces | CPU per msg (ms) | latency p50 (ms) | latency p99 (ms) | lost |",
        "|---|---|---|---|---|---|",
    ]
    for phase in ("crowd", "sequential"):
        for kind in SIDES:
            runs = data[phase][kind]
            m = {
                k: _median([r[k] for r in runs])
                for k in ("cpu_per_msg_ms", "latency_p50_ms", "latency_p99_ms")
            }
            lines.append(
                f"| {phase} | {kind} | {m['cpu_per_msg_ms']} | {m['latency_p50_ms']} "
                f"| {m['latency_p99_ms']} | {sum(r['lost'] for r in runs)} |"
            )
    lines.append("")
    for phase, ratios in data["ratios"].items():
        shown = ", ".join(f"{k} {v}" for k, v in ratios.items())
        lines.append(f"{phase}: on ÷ off: {shown}")
    lines.append(f"spans (traced side, /metrics): {data['spans']}")
    return "\n".join(lines)


def main(mode: str, workdir: Path | None, json_path: Path) -> dict[str, Any]:
    """Run it (on uvloop, in a temp dir unless ``workdir``); the results, also at ``json_path``."""
    import json

    import uvloop

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with contextlib.ExitStack() as stack:
        wd = workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="hermes-traces-"))
        )
        wd.mkdir(parents=True, exist_ok=True)
        data = uvloop.run(run(mode, wd, say))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    return data
