"""`hermes mcp list` (the configured servers, and what the running gateway says of each:
state, tools) and `hermes mcp test NAME` (start that one server here, inside the tools'
walls, and list its tools)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import httpx

from hermes_gateway.config import Config

EXIT_OK = 0
EXIT_FAILURE = 1


def add_parser(sub: Any, with_config: Any) -> None:
    mcp = sub.add_parser("mcp", help="the MCP servers whose tools the model may use")
    msub = mcp.add_subparsers(dest="action", required=True)
    listing = with_config(msub.add_parser("list", help="servers, their state and tools"))
    listing.add_argument("--url", help="control API base URL (default: from the config)")
    test = with_config(msub.add_parser("test", help="start one server here and list its tools"))
    test.add_argument("name", help="the server's name under mcp.servers")


def run_mcp(args: argparse.Namespace, url: str, token: str | None, config: Config) -> int:
    if args.action == "test":
        return run_test(config, args.name, args.config)
    return run_list(config, url, token)


def run_list(config: Config, url: str, token: str | None) -> int:
    servers = config.mcp.servers
    if not servers:
        print("no MCP server is configured (mcp.servers)")
        return EXIT_OK
    live, note = _live_status(url, token)
    for name, server in servers.items():
        where = server.url or " ".join([server.command, *server.args])
        mode = "enabled" if server.enabled else "disabled"
        seen = live.get(name, {})
        state = seen.get("state", note)
        print(f"{name}: {mode}, {'http' if server.url else 'stdio'} {where}; {state}")
        if seen.get("last_error"):
            print(f"  last error: {seen['last_error']}")
        for tool in seen.get("tools", []):
            print(f"  {tool}")
    return EXIT_OK


def _live_status(url: str, token: str | None) -> tuple[dict[str, Any], str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(f"{url}/status", headers=headers, timeout=10)
    except httpx.HTTPError:
        return {}, "the gateway is not running (hermes mcp test NAME starts one server)"
    if response.status_code != 200:
        return {}, f"the gateway's /status answered {response.status_code}"
    servers: dict[str, Any] = response.json().get("mcp", {})
    return servers, "not started by the gateway (disabled)"


def run_test(config: Config, name: str, config_file: str | None) -> int:
    if name not in config.mcp.servers:
        known = ", ".join(config.mcp.servers) or "none"
        print(f"hermes: no MCP server {name!r} in mcp.servers (configured: {known})")
        return EXIT_FAILURE
    status = probe(config, config_file, [name])[name]
    if status["state"] != "ready":
        print(f"{name}: {status['state']}: {status['last_error']}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{name}: ready, {len(status['tools'])} tool(s)")
    for tool in status["tools"]:
        print(f"  {tool}")
    return EXIT_OK


def probe(config: Config, config_file: str | None, names: list[str]) -> dict[str, Any]:
    """Start the ``names`` servers here, as the gateway would (a stdio one in the tools'
    walls), wait for their first listing, stop them: each one's status."""
    from hermes_gateway.agents.factory import confine_tools, mcp_manager

    confine_tools(config, config_file)
    chosen = {
        name: config.mcp.servers[name].model_copy(update={"enabled": True, "eager": True})
        for name in names
    }
    only = config.model_copy(update={"mcp": config.mcp.model_copy(update={"servers": chosen})})
    manager = mcp_manager(only)
    assert manager is not None
    return asyncio.run(_probe(manager, names))


async def _probe(manager: Any, names: list[str]) -> dict[str, Any]:
    await manager.start()
    try:
        for name in names:
            await asyncio.to_thread(manager.wait_listed, name)
        status: dict[str, Any] = manager.status()
    finally:
        await manager.stop()
    return status
