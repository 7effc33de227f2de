"""What one call of an MCP server's tool costs the gateway, against a built-in tool's call, in
one run: ``python -m bench.mcp_call [-n N] [--runs R]``.

Both go through the registry as the agent's calls do (`ToolRegistry.dispatch`: argument
check, output cap): `mcp_bench_echo` on a stdio server (the SDK's, started inside the tools'
walls) and on a streamable HTTP server on 127.0.0.1, against the built-in `read_file` of a
small file. Model round trips are left out. Figures are medians of R runs of N calls, per
call, printed with their ratio to the built-in; they are never asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hermes_gateway.config.schema import McpConfig
from hermes_gateway.mcp.link import Walls
from hermes_gateway.mcp.manager import McpManager
from tests.mcp.servers import http_server, write_server
from tools.catalog import ToolSettings, build_registry
from tools.registry import ToolContext, ToolRegistry


def _per_call_ms(fn: Callable[[], object], n: int, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - started) * 1000 / n)
    return statistics.median(times)


def _call(registry: ToolRegistry, ctx: ToolContext, name: str, args: str) -> None:
    outcome = registry.dispatch(name, args, ctx)
    assert outcome.ok, outcome.content


async def _measure(workspace: Path, url: str, n: int, runs: int) -> dict[str, float]:
    script = write_server(workspace)
    servers = {
        "bench": {"command": sys.executable, "args": [str(script)], "eager": True},
        "web": {"url": url, "eager": True},
    }
    manager = McpManager(
        McpConfig.model_validate({"servers": servers}), Walls(workspace, {}, 1 << 22)
    )
    await manager.start()
    try:
        return await asyncio.to_thread(_calls, manager, workspace, n, runs)
    finally:
        await manager.stop()


def _calls(manager: McpManager, workspace: Path, n: int, runs: int) -> dict[str, float]:
    for name in manager.links:
        manager.wait_listed(name)
    registry = manager.live(build_registry(["read_file"], ToolSettings()), "api:dm:bench")
    ctx = ToolContext(workspace=workspace)
    (workspace / "a.txt").write_text("a line\n" * 100)
    echo = json.dumps({"text": "hello"})
    figures = {
        "builtin_read_file_ms": _per_call_ms(
            lambda: _call(registry, ctx, "read_file", '{"path": "a.txt"}'), n, runs
        ),
        "mcp_stdio_ms": _per_call_ms(lambda: _call(registry, ctx, "mcp_bench_echo", echo), n, runs),
        "mcp_http_ms": _per_call_ms(lambda: _call(registry, ctx, "mcp_web_echo", echo), n, runs),
    }
    base = figures["builtin_read_file_ms"]
    figures["stdio_ratio"] = figures["mcp_stdio_ms"] / base
    figures["http_ratio"] = figures["mcp_http_ms"] / base
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_call")
    parser.add_argument("-n", type=int, default=200, help="calls per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    # not under /tmp: the walls give a stdio server a private one
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp, http_server(Path(tmp) / "http") as url:
        figures = asyncio.run(_measure(Path(tmp) / "workspace", url, args.n, args.runs))
    for key, value in figures.items():
        print(f"{key:22} {value:8.3f}")


if __name__ == "__main__":
    main()
