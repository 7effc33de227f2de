"""MCP through `hermes gateway run`: the model lists and calls a stdio server's tools (the
server started by the daemon inside the tools' walls, eagerly) and a streamable HTTP
server's; `hermes mcp list` shows them from the running daemon; `hermes mcp test NAME` starts
a server alone and lists its tools; a server that cannot start is reported in /readyz's
reasons, /status and `hermes mcp list` while the gateway answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.mcp.servers import http_server, write_server

pytestmark = [pytest.mark.e2e, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def hermes(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_gateway", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=90,
        env=dict(os.environ),
        check=False,
    )


def status(gw: GatewayProcess) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{gw.url}/status", headers=gw.operator, timeout=10).json()
    return answer


def daemon(tmp_path: Path, llm: FakeOpenAI, servers: dict[str, Any]) -> GatewayProcess:
    model = {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0}
    return GatewayProcess(tmp_path / "home", {"model": model, "mcp": {"servers": servers}})


def wait_state(gw: GatewayProcess, server: str, state: str, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while status(gw)["mcp"][server]["state"] != state:
        assert time.monotonic() < deadline, status(gw)["mcp"]
        time.sleep(0.2)


def test_the_model_lists_and_calls_mcp_tools_through_hermes_gateway_run(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    script = write_server(tmp_path / "home" / "workspace")
    with http_server(tmp_path / "http") as url:
        servers = {
            "demo": {"command": sys.executable, "args": [str(script)], "eager": True},
            "web": {"url": url},
        }
        gw = daemon(tmp_path, fake_llm, servers)
        try:
            gw.start()
            wait_state(gw, "demo", "ready")
            fake_llm.push(
                tool_calls(("mcp_demo_echo", {"text": "e2e"}), ("mcp_web_echo", {"text": "web"})),
                text("both answered"),
            )
            answer = gw.chat("use the MCP tools", timeout=60).json()
            listing = hermes("mcp", "list", config=gw.config_path)
        finally:
            gw.kill()
    request = fake_llm.requests[-1]
    offered = {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert {"mcp_demo_echo", "mcp_web_echo", "mcp_demo_terminal"} <= offered
    observations = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    assert observations == ["echo:e2e", "echo:web"]
    assert answer["choices"][0]["message"]["content"] == "both answered"
    assert "demo: enabled, stdio" in listing.stdout and "mcp_demo_echo" in listing.stdout
    assert "web: enabled, http" in listing.stdout and "mcp_web_echo" in listing.stdout


@pytest.mark.slow
def test_a_server_that_keeps_failing_is_reported_and_mcp_test_lists_a_server(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    script = write_server(tmp_path / "home" / "workspace")
    servers = {
        "demo": {"command": sys.executable, "args": [str(script)]},
        "broken": {"command": "/nonexistent/mcp-server", "eager": True},
    }
    gw = daemon(tmp_path, fake_llm, servers)
    try:
        gw.start()
        wait_state(gw, "broken", "failing")
        ready = httpx.get(f"{gw.url}/readyz", timeout=10)
        listing = hermes("mcp", "list", config=gw.config_path)
        fake_llm.push(text("still here"))
        answer = gw.chat("hello", timeout=30).json()
    finally:
        gw.kill()
    tested = hermes("mcp", "test", "demo", config=gw.config_path)
    broken = hermes("mcp", "test", "broken", config=gw.config_path)
    # the broken server is named in the reasons; the gateway stays ready and answers
    assert ready.status_code == 200
    assert any(r.startswith("mcp broken: failing") for r in ready.json()["reasons"])
    assert "broken: enabled, stdio /nonexistent/mcp-server; failing" in listing.stdout
    assert answer["choices"][0]["message"]["content"] == "still here"
    assert tested.returncode == 0, tested.stderr
    assert "demo: ready" in tested.stdout and "mcp_demo_echo" in tested.stdout
    assert broken.returncode == 1 and "broken:" in broken.stderr
