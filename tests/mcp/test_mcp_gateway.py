"""MCP servers inside a running gateway, driven by the fake model: a real server over stdio
(started by the gateway inside the tools' walls) and over streamable HTTP (served by the
test); the tools' names, calls, approval, a death mid-call, a call that hangs, and the
hostile cases (a 100 MB answer, a notification flood, a schema bomb, a built-in's name)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.harness import Client, eventually, make_config, running_gateway
from tests.mcp.servers import http_server, write_server

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def stdio_config(tmp_path: Path, llm: FakeOpenAI, **server: Any) -> Any:
    workspace = tmp_path / "home" / "workspace"
    script = write_server(workspace)
    import sys

    entry = {"command": sys.executable, "args": [str(script)], "timeout_s": 20, **server}
    return make_config(
        tmp_path,
        llm.base_url,
        tools={"enabled": ["read_file", "terminal"]},
        mcp={"servers": {"demo": entry}},
    )


def observations(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools", [])]


async def call(api: Client, llm: FakeOpenAI, name: str, args: dict[str, Any]) -> str:
    """One turn in which the model calls ``name``; the observation it got back."""
    llm.push(tool_calls((name, args)), text("done"))
    answer = await api.chat(f"please call {name}")
    assert answer["text"] == "done", answer
    return observations(llm.requests[-1])[-1]


async def test_a_stdio_servers_tools_reach_the_model_named_apart_and_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = stdio_config(tmp_path, fake_llm)
    async with running_gateway(config) as (gw, api):
        said = await call(api, fake_llm, "mcp_demo_echo", {"text": "hello"})
        names = offered(fake_llm.requests[-1])
        wrong = await call(api, fake_llm, "mcp_demo_echo", {"text": 5})
        status = (await api.get("/status", operator=True))[1]["mcp"]
    assert said == "echo:hello"
    assert "invalid arguments for mcp_demo_echo" in wrong
    # a server's tool named like a built-in stays apart from it; the built-in is still there
    assert {"terminal", "read_file", "mcp_demo_terminal", "mcp_demo_echo"} <= set(names)
    assert "mcp_demo_bomb" not in names  # its schema nests 40 deep: refused
    assert status["demo"]["state"] == "ready"
    assert "mcp_demo_echo" in status["demo"]["tools"]


@pytest.mark.parametrize("json_response", [False, True], ids=["event-stream", "json"])
async def test_a_streamable_http_servers_tools_are_listed_called_and_bounded(
    tmp_path: Path, fake_llm: FakeOpenAI, json_response: bool
) -> None:
    with http_server(tmp_path / "http", json_response=json_response) as url:
        web = {"url": url, "headers": {"X-Test": "1"}, "eager": True}
        config = make_config(
            tmp_path,
            fake_llm.base_url,
            mcp={"servers": {"web": web}, "max_message_bytes": 1024 * 1024},
        )
        async with running_gateway(config) as (gw, api):
            said = await call(api, fake_llm, "mcp_web_echo", {"text": "over http"})
            names = offered(fake_llm.requests[-1])
            huge = await call(api, fake_llm, "mcp_web_big", {"mb": 8})
            after = await call(api, fake_llm, "mcp_web_echo", {"text": "after"})
    assert said == "echo:over http"
    assert "mcp_web_pid" in names
    # an answer past mcp.max_message_bytes is refused (a JSON body by the gateway's transport,
    # an event by the SDK's bound); the server is reached again after
    assert huge.startswith("Error:") and len(huge) < 2000, huge[:300]
    assert after == "echo:after"


async def test_a_server_killed_mid_call_gives_an_error_and_is_restarted(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_gateway(stdio_config(tmp_path, fake_llm)) as (gw, api):
        before = await call(api, fake_llm, "mcp_demo_pid", {})
        died = await call(api, fake_llm, "mcp_demo_die", {})
        after = await call(api, fake_llm, "mcp_demo_pid", {})
        status = (await api.get("/status", operator=True))[1]["mcp"]["demo"]
    assert before.startswith("run-") and after.startswith("run-") and before != after
    assert died.startswith("Error:") and "went away during the call" in died
    assert status["state"] == "ready" and status["restarts"] == 1


async def test_a_hanging_call_is_cut_by_the_timeout(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = stdio_config(tmp_path, fake_llm, timeout_s=2)
    async with running_gateway(config) as (gw, api):
        timed_out = await call(api, fake_llm, "mcp_demo_hang", {})
        after = await call(api, fake_llm, "mcp_demo_echo", {"text": "still here"})
    assert "did not answer within 2 s" in timed_out
    assert after == "echo:still here"


async def test_a_hanging_call_is_cut_by_stop(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = stdio_config(tmp_path, fake_llm, timeout_s=120)
    async with running_gateway(config) as (gw, api):
        await call(api, fake_llm, "mcp_demo_echo", {"text": "warm"})
        fake_llm.push(tool_calls(("mcp_demo_hang", {})), text("never"))
        stuck = asyncio.create_task(api.chat("hang"))
        await eventually(lambda: gw.pool.busy == 1 and len(fake_llm.requests) >= 2)
        await asyncio.sleep(0.3)  # the call is in flight on the server
        stop = await api.chat("/stop")
        stopped = await stuck
        # the worker thread came back: the call was cut, not left to its 120 s timeout
        await eventually(lambda: gw.pool.busy == 0 and gw.pool.abandoned == 0, timeout=15)
        fake_llm.reset()  # the stopped turn never asked for its "never"
        after = await call(api, fake_llm, "mcp_demo_echo", {"text": "still here"})
    assert stop["text"] == "Stopped." and stopped["text"] == "Stopped."
    assert after == "echo:still here"


async def test_approval_is_asked_for_the_configured_tools_only(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = stdio_config(tmp_path, fake_llm, approval=["echo"])
    async with running_gateway(config) as (gw, api):
        asked = await call(api, fake_llm, "mcp_demo_echo", {"text": "x"})
        free = await call(api, fake_llm, "mcp_demo_pid", {})
    # the local API has no way to ask: the call is refused with the reason, not run
    assert asked.startswith("Error:") and "approval" in asked
    assert free.startswith("run-")


async def test_hostile_answers_are_bounded_and_the_gateway_keeps_answering(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = stdio_config(tmp_path, fake_llm)
    async with running_gateway(config) as (gw, api):
        await call(api, fake_llm, "mcp_demo_echo", {"text": "warm"})
        fake_llm.push(tool_calls(("mcp_demo_big", {"mb": 100})), text("done"))
        turn = asyncio.create_task(api.chat("a huge answer"))
        health = []
        while not turn.done():
            started = time.monotonic()
            status, _ = await api.get("/healthz")
            health.append((status, time.monotonic() - started))
            await asyncio.sleep(0.2)
        assert (await turn)["text"] == "done"
        huge = observations(fake_llm.requests[-1])[-1]
        flooded = await call(api, fake_llm, "mcp_demo_flood", {"count": 3000})
        after = await call(api, fake_llm, "mcp_demo_echo", {"text": "fine"})
    assert huge.startswith("Error:") and len(huge) < 2000
    assert all(status == 200 and seconds < 5 for status, seconds in health), health
    assert flooded == "flooded"
    assert after == "echo:fine"


async def test_a_long_answer_is_cut_for_the_model_and_spilled_whole_to_a_file(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = stdio_config(tmp_path, fake_llm)
    async with running_gateway(config) as (gw, api):
        seen = await call(api, fake_llm, "mcp_demo_long", {"chars": 200_000})
    assert len(seen) <= 50_000
    spilled = next((tmp_path / "home" / "workspace" / "mcp-output").iterdir())
    assert len(spilled.read_text()) == 200_000
    assert "mcp-output/" in seen and "200000 characters" in seen


async def test_a_tools_list_changed_notification_refreshes_the_tools_without_a_restart(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with running_gateway(stdio_config(tmp_path, fake_llm)) as (gw, api):
        grown = await call(api, fake_llm, "mcp_demo_grow", {"name": "fresh"})
        before = offered(fake_llm.requests[-1])
        await eventually(lambda: "mcp_demo_fresh" in gw.mcp.status()["demo"]["tools"])
        said = await call(api, fake_llm, "mcp_demo_fresh", {})
        after = offered(fake_llm.requests[-1])
        restarts = gw.mcp.status()["demo"]["restarts"]
    assert grown == "grown" and "mcp_demo_fresh" not in before
    assert "mcp_demo_fresh" in after and said == "I am fresh"
    assert restarts == 0


async def test_sighup_lists_the_tools_again(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    """A server that changed its tools without saying so: the reload (SIGHUP) lists them."""
    async with running_gateway(stdio_config(tmp_path, fake_llm)) as (gw, api):
        grown = await call(api, fake_llm, "mcp_demo_grow_quietly", {"name": "quiet"})
        await asyncio.sleep(0.5)
        unseen = "mcp_demo_quiet" not in gw.mcp.status()["demo"]["tools"]
        await gw.reload()
        await eventually(lambda: "mcp_demo_quiet" in gw.mcp.status()["demo"]["tools"])
        said = await call(api, fake_llm, "mcp_demo_quiet", {})
    assert grown == "grown" and unseen and said == "I am quiet"


def test_doctor_starts_each_server_and_says_which_fail(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    from hermes_gateway.cli.doctor import Doctor

    config = stdio_config(tmp_path, fake_llm)
    servers = {**config.mcp.servers}
    servers["broken"] = servers["demo"].model_copy(update={"command": "/nonexistent/server"})
    config = config.model_copy(update={"mcp": config.mcp.model_copy(update={"servers": servers})})
    check = Doctor(config).mcp()
    assert check.status == "FAIL"
    assert "ready: demo (" in check.detail and "broken:" in check.detail


async def test_the_dashboards_overview_lists_the_servers(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    from tests.dashboard.test_pages import _first_events

    config = stdio_config(tmp_path, fake_llm, eager=True)
    async with running_gateway(config) as (gw, api):
        await eventually(lambda: gw.mcp.status()["demo"]["state"] == "ready", timeout=30)
        await api.dashboard_login()
        base = f"http://127.0.0.1:{gw.control.port}/dashboard"
        events = await _first_events(api.http, f"{base}/events/overview", 3)
    [status] = [data for kind, data in events if kind == "status"]
    assert status["mcp"]["demo"]["state"] == "ready"
    assert "mcp_demo_echo" in status["mcp"]["demo"]["tools"]


async def test_a_server_that_never_answers_its_start_is_cut_and_retried(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    import sys

    silent = {"command": sys.executable, "args": ["-c", "import time; time.sleep(3600)"]}
    config = make_config(
        tmp_path,
        fake_llm.base_url,
        mcp={"servers": {"mute": {**silent, "eager": True, "connect_timeout_s": 1}}},
    )
    async with running_gateway(config) as (gw, api):
        await eventually(lambda: gw.mcp.status()["mute"]["restarts"] >= 1, timeout=20)
        status = gw.mcp.status()["mute"]
        fake_llm.push(text("answered"))
        answer = await api.chat("hello")
    assert "Timeout" in (status["last_error"] or "")
    assert answer["text"] == "answered"


def test_platforms_and_chats_choose_the_sessions_that_get_a_servers_tools(
    tmp_path: Path,
) -> None:
    from hermes_gateway.config.schema import McpConfig
    from hermes_gateway.mcp.link import Walls
    from hermes_gateway.mcp.manager import McpManager
    from tools.registry import ToolRegistry

    servers = {
        "tg": {"command": "x", "platforms": ["telegram"]},
        "one": {"command": "x", "chats": ["slack:channel:C1"]},
    }
    manager = McpManager(McpConfig.model_validate({"servers": servers}), Walls(tmp_path, {}, 1024))
    base = ToolRegistry()
    assert manager.live(base, "api:dm:alice") is base  # neither server: the registry itself
    assert manager.live(base, "telegram:dm:42") is not base
    assert manager.live(base, "slack:channel:C1:U7") is not base
    assert manager.live(base, "slack:channel:C2:U7") is base
