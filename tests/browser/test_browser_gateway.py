"""The browser inside a running gateway: a session's page is opened by the model's call, refused
addresses reach the model as the guard's words, and `/new` and `/stop` close the session's
browser context."""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_gateway.browser.pool import BrowserPool
from tests.browser.conftest import needs_chromium
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.harness import make_config, running_gateway
from tools import catalog
from tools.errors import ToolError
from tools.host import BrowserRequest

pytestmark = [needs_chromium]
INSTALLED = Path(__file__).resolve().parent / "installed"


@pytest.fixture
def browser_tools_installed() -> Iterator[None]:
    """The browser tools' entry points, when this environment was installed without them."""
    added = "browser_navigate" not in catalog.tool_names()
    if added:
        sys.path.insert(0, str(INSTALLED))
        importlib.invalidate_caches()
        catalog.tool_specs.cache_clear()
    try:
        yield
    finally:
        if added:
            sys.path.remove(str(INSTALLED))
            importlib.invalidate_caches()
            catalog.tool_specs.cache_clear()


async def sessions_become(pool: BrowserPool, count: int) -> int:
    deadline = time.monotonic() + 15
    now = await asyncio.to_thread(pool.sessions)
    while now != count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        now = await asyncio.to_thread(pool.sessions)
    return now


@pytest.mark.parametrize("command", ["/new", "/stop"])
async def test_new_and_stop_close_the_sessions_page(
    tmp_path: Path, fake_llm: FakeOpenAI, browser_tools_installed: None, command: str
) -> None:
    tools = {"enabled": ["browser_navigate", "browser_snapshot"]}
    config = make_config(tmp_path, fake_llm.base_url, tools=tools)
    fake_llm.push(
        tool_calls(("browser_navigate", {"url": f"{fake_llm.url}/v1/models"})), text("opened")
    )
    async with running_gateway(config) as (gw, api):
        pool = gw.tool_host.browser
        assert pool is not None
        assert (await api.chat("open the page"))["text"] == "opened"
        # no allow-list in this config: the fake model's loopback port is refused
        [seen] = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
        assert "SSRF guard refused" in seen and "127.0.0.1" in seen
        assert await sessions_become(pool, 1) == 1
        await api.chat(command)
        assert await sessions_become(pool, 0) == 0
    assert not pool.running()  # the gateway's shutdown ended the browser


async def test_no_browser_is_built_when_no_browser_tool_is_enabled(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    config = make_config(tmp_path, fake_llm.base_url)
    async with running_gateway(config) as (gw, api):
        assert gw.tool_host.browser is None
        browse = gw.tool_host.host.browse
        assert browse is not None  # lent, as every service is, and answering as if not
        with pytest.raises(ToolError, match="no browser is available here"):
            browse(
                BrowserRequest("api:dm:alice", "navigate", url="https://example.com"), lambda: False
            )


def test_doctor_starts_the_browser_when_a_browser_tool_is_enabled(
    tmp_path: Path, browser_tools_installed: None
) -> None:
    from hermes_gateway.cli.doctor import Doctor

    enabled = make_config(tmp_path, None, tools={"enabled": ["browser_navigate"]})
    check = Doctor(enabled).browser()
    assert check.status == "ok" and "started in" in check.detail, check
    assert Doctor(make_config(tmp_path, None)).browser().status == "skip"
