"""`hermes gateway status`: the service, the process and the control API's `/status`, as a
readable report (the model line shows the model's last known state). Exit 0 when ready (a failing
model leaves it ready: see docs/control-api.md), 1 when running but not ready, 3 when down."""

from __future__ import annotations

from typing import Any, TextIO

import httpx

from hermes_gateway.cli.cluster_view import render_cluster
from hermes_gateway.cli.control_client import TOKEN_HINT
from hermes_gateway.cli.inbox import print_quarantined

EXIT_READY = 0
EXIT_UNHEALTHY = 1
EXIT_DOWN = 3  # systemctl's "program is not running"


def gateway_status(
    url: str, token: str | None, service_state: str, out: TextIO, cluster: bool = False
) -> int:
    """``cluster``: also every instance, the leader leases and lease ages (`--cluster`)."""
    out.write(f"service      {service_state}\n")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(f"{url}/status", headers=headers, timeout=5)
    except httpx.HTTPError:
        out.write(f"gateway      down (nothing answers at {url})\n")
        return EXIT_DOWN
    if response.status_code != 200:
        out.write(f"gateway      answering, but /status said HTTP {response.status_code}\n")
        if response.status_code == 401:
            out.write(f"             {TOKEN_HINT}\n")
        return EXIT_UNHEALTHY
    status: dict[str, Any] = response.json()
    _render(status, out)
    if status.get("cluster"):
        render_cluster(status["cluster"], out, cluster)
    elif cluster:
        out.write("cluster      not in cluster mode (cluster.redis_url is not set)\n")
    return EXIT_READY if status.get("ready") else EXIT_UNHEALTHY


def _render(s: dict[str, Any], out: TextIO) -> None:
    ready = "ready" if s.get("ready") else "NOT READY: " + "; ".join(s.get("reasons", []))
    out.write(f"gateway      {ready} (version {s.get('version')}, up {_duration(s['uptime_s'])})\n")
    model = s.get("model", {})
    out.write(f"model        {model.get('name')}{_model_state(model)}\n")
    for name, p in s.get("platforms", {}).items():
        state = "connected" if p.get("ready") else f"DOWN {p.get('detail', '')}".rstrip()
        out.write(f"  {name:<10} {state}\n")
    sessions, pool, lag = s.get("sessions", {}), s.get("pool", {}), s.get("loop_lag_ms", {})
    out.write(
        f"sessions     {sessions.get('active', 0)} active, {sessions.get('pending', 0)} pending, "
        f"{sessions.get('cached_agents', 0)} cached\n"
    )
    out.write(
        f"workers      {pool.get('busy', 0)}/{pool.get('workers', 0)} busy, "
        f"{pool.get('waiting', 0)} waiting, {pool.get('abandoned', 0)} abandoned\n"
    )
    last, p99, worst = lag.get("last"), lag.get("p99"), lag.get("max")
    out.write(f"loop lag     last {last} ms, p99 {p99} ms, max {worst} ms\n")
    jobs = s.get("scheduler") or {}
    if jobs.get("enabled"):
        count = sum((jobs.get("jobs") or {}).values())
        out.write(
            f"scheduler    {count} job(s), {jobs.get('running', 0)} running, last tick "
            f"{jobs.get('last_tick_s_ago')} s ago (hermes cron list)\n"
        )
    memory = s.get("memory") or {}
    if memory:
        out.write(f"memory       {memory.get('scope')}, embeddings {memory.get('embeddings')}\n")
    if memory.get("legacy_memory_md"):  # the owner decides whose it is
        out.write(f"  {memory['legacy_memory_md']}\n")
    held = s.get("quarantined") or []
    if held:  # messages the gateway kept dying on: the operator decides (`hermes inbox`)
        out.write(f"quarantined  {len(held)} (hermes inbox retry ID | drop ID)\n")
        print_quarantined(held, out.write)


def _model_state(model: dict[str, Any]) -> str:
    """The model's last known state, from the gateway's own calls (`hermes doctor` probes)."""
    if not model.get("configured"):
        return " (not configured)"
    state, ago = model.get("state"), model.get("last_call_s_ago")
    if state == "failing":
        error = model.get("error") or {}
        return (
            f", FAILING: the last call {_duration(ago or 0)} ago: {error.get('kind')}: "
            f"{error.get('message')}"
        )
    if state == "ok":
        return f", ok (the last call {_duration(ago or 0)} ago)"
    return ", no call yet"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
