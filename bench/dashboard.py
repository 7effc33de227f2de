"""``python -m bench.dashboard [--quick] [--json PATH]``: what an open dashboard page costs the
gateway. One `hermes gateway run` on the fake model; rounds alternate between no page and one
Overview page streaming (its event stream read as a browser would), each round sending the same
messages through the local API. Reports CPU per message, idle CPU and loop lag p99 in both, as
same-run ratios, and the Overview's time to first render on loopback (HTML, its static files,
and the first `status` event)."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop
import yaml

from bench import lag
from bench.procs import ROOT, Child, free_port, start_fake
from hermes_gateway.control.token import operator_token
from hermes_gateway.dashboard.auth import COOKIE

ASSETS = ("style.css", "dashboard.js", "uPlot.min.css", "uPlot.iife.min.js", "overview.js")


class Page:
    """An open Overview: its event stream read to the end of each event, in the background."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.events = 0
        self._task = asyncio.create_task(self._read(http, base))

    async def _read(self, http: aiohttp.ClientSession, base: str) -> None:
        async with http.get(f"{base}/dashboard/events/overview", timeout=None) as resp:
            async for line in resp.content:
                if line.startswith(b"event: "):
                    self.events += 1

    async def close(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass


async def first_render(http: aiohttp.ClientSession, base: str) -> float:
    start = time.perf_counter()
    async with http.get(f"{base}/dashboard/") as resp:
        await resp.read()
    await asyncio.gather(*(_get(http, f"{base}/dashboard/static/{a}") for a in ASSETS))
    async with http.get(f"{base}/dashboard/events/overview") as resp:
        async for line in resp.content:
            if line.startswith(b"event: status"):
                break
    return time.perf_counter() - start


async def _get(http: aiohttp.ClientSession, url: str) -> None:
    async with http.get(url) as resp:
        await resp.read()


async def send(http: aiohttp.ClientSession, base: str, sessions: int, each: int) -> None:
    async def one(user: str) -> None:
        for n in range(each):
            body = {"user": user, "messages": [{"role": "user", "content": f"message {n}"}]}
            async with http.post(f"{base}/v1/chat/completions", json=body) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"{resp.status}: {await resp.text()}")
                await resp.read()

    await asyncio.gather(*(one(f"bench{s}-{time.monotonic_ns()}") for s in range(sessions)))


async def lag_buckets(http: aiohttp.ClientSession, base: str) -> lag.Buckets:
    async with http.get(f"{base}/metrics") as resp:
        return lag.parse(await resp.text())


async def phase(
    http: aiohttp.ClientSession, base: str, gw: Child, page: bool, plan: dict[str, int]
) -> dict[str, float]:
    opened = Page(http, base) if page else None
    await asyncio.sleep(1)  # the page's first events are not the load's
    cpu0, lag0, t0 = gw.cpu_s(), await lag_buckets(http, base), time.perf_counter()
    await send(http, base, plan["sessions"], plan["each"])
    cpu1, lag1, t1 = gw.cpu_s(), await lag_buckets(http, base), time.perf_counter()
    await asyncio.sleep(plan["idle_s"])
    cpu2 = gw.cpu_s()
    if opened is not None:
        await opened.close()
    messages = plan["sessions"] * plan["each"]
    return {
        "cpu_ms_per_msg": (cpu1 - cpu0) * 1000 / messages,
        "msgs_per_s": messages / (t1 - t0),
        "idle_cpu_pct": (cpu2 - cpu1) * 100 / plan["idle_s"],
        "lag": lag.diff(lag1, lag0),  # type: ignore[dict-item]
    }


def summary(results: list[dict[str, Any]]) -> dict[str, float | None]:
    merged: lag.Buckets = {}
    for r in results:
        merged = lag.add(merged, r["lag"])
    p99 = lag.quantile(0.99, merged)
    return {
        "cpu_ms_per_msg": statistics.median(r["cpu_ms_per_msg"] for r in results),
        "msgs_per_s": statistics.median(r["msgs_per_s"] for r in results),
        "idle_cpu_pct": statistics.median(r["idle_cpu_pct"] for r in results),
        "loop_lag_p99_ms": None if p99 is None else p99 * 1000,
    }


async def run(quick: bool, workdir: Path) -> dict[str, Any]:
    plan = {"rounds": 2 if quick else 5, "sessions": 10, "each": 10 if quick else 30}
    plan["idle_s"] = 5 if quick else 15
    llm_child, llm = start_fake(workdir, "openai", "llm")
    port = free_port()
    config = {
        "home": str(workdir / "home"),
        "control": {"port": port},
        "model": {"base_url": llm, "api_key": "sk-fake", "timeout_s": 30},
        "watchdog": {"interval_ms": 20},  # more lag samples (as the main bench)
        "logging": {"format": "json"},
    }
    path = workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    gw = Child("gateway", [sys.executable, "-m", "hermes_gateway", "gateway", "run", "--config",
                           str(path)], workdir)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            await _healthy(http, base, gw)
            await _log_in(http, base, workdir / "home")
            renders = [await first_render(http, base) for _ in range(5)]
            await send(http, base, plan["sessions"], 2)  # warm: agents built, GC frozen
            none, one = [], []
            for _ in range(plan["rounds"]):  # interleaved: machine noise lands on both
                none.append(await phase(http, base, gw, False, plan))
                one.append(await phase(http, base, gw, True, plan))
    finally:
        gw.stop()
        llm_child.stop()
    a, b = summary(none), summary(one)
    return {
        "plan": plan,
        "no_page": a,
        "one_page": b,
        "ratio_cpu_per_msg": b["cpu_ms_per_msg"] / a["cpu_ms_per_msg"],  # type: ignore[operator]
        "ratio_loop_lag_p99": (
            b["loop_lag_p99_ms"] / a["loop_lag_p99_ms"]
            if a["loop_lag_p99_ms"] and b["loop_lag_p99_ms"]
            else None
        ),
        "first_render_ms": {
            "median": statistics.median(renders) * 1000,
            "max": max(renders) * 1000,
        },
    }


async def _healthy(http: aiohttp.ClientSession, base: str, gw: Child) -> None:
    for _ in range(400):
        gw.check_alive()
        try:
            async with http.get(f"{base}/readyz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the gateway did not get ready\n{gw.stderr()}")


async def _log_in(http: aiohttp.ClientSession, base: str, home: Path) -> None:
    """The dashboard wants a session: a one-time link got with the gateway's token file, as
    `hermes dashboard` gets one; the cookie then goes with every request of ``http``."""
    headers = {"Authorization": f"Bearer {operator_token(None, home)}"}
    async with http.post(f"{base}/dashboard-link", headers=headers) as resp:
        path = (await resp.json())["path"]
    async with http.get(base + path, allow_redirects=False) as resp:
        http.headers["Cookie"] = f"{COOKIE}={resp.cookies[COOKIE].value}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 100 messages")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "dashboard.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hermes-bench-dash-") as tmp:
        data = uvloop.run(run(args.quick, Path(tmp)))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=2) + "\n")
    a, b = data["no_page"], data["one_page"]
    print("| | no page | one Overview page streaming | ratio |")
    print("|---|---|---|---|")
    ratio_lag = data["ratio_loop_lag_p99"]
    print(
        f"| CPU per message (ms) | {a['cpu_ms_per_msg']:.2f} | {b['cpu_ms_per_msg']:.2f} "
        f"| {data['ratio_cpu_per_msg']:.3f} |"
    )
    print(
        f"| loop lag p99 (ms) | {_ms(a['loop_lag_p99_ms'])} | {_ms(b['loop_lag_p99_ms'])} "
        f"| {'–' if ratio_lag is None else f'{ratio_lag:.3f}'} |"
    )
    print(f"| idle CPU (%) | {a['idle_cpu_pct']:.2f} | {b['idle_cpu_pct']:.2f} | |")
    print(f"| messages/s | {a['msgs_per_s']:.1f} | {b['msgs_per_s']:.1f} | |")
    render = data["first_render_ms"]
    print(f"\nOverview time to first render: {render['median']:.1f} ms (max {render['max']:.1f})")
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
