"""The browser tools through the agent's tool registry: the fake model scripts navigate, click
and screenshot calls, the registry hands them to the browser with only the host service their
specs need, and the observations the model reads are the real pages."""

from __future__ import annotations

import re
from pathlib import Path

from agent_core import AIAgent, LLMClient, LLMSettings
from hermes_gateway.browser.pool import BrowserPool
from tests.browser.conftest import needs_chromium
from tests.browser.site import Site
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tools import browser as browser_tools
from tools import builtin
from tools.catalog import ToolSettings
from tools.host import BrowserRequest, ToolHost
from tools.registry import ToolRegistry
from tools.vision import sniff_image

pytestmark = [needs_chromium]
SPECS = [getattr(builtin, name) for name in dir(builtin) if name.startswith("BROWSER_")]


def registry() -> ToolRegistry:
    """The browser tools as the catalog builds them, with their specs' needs."""
    made = [getattr(browser_tools, spec.factory.split(":")[1])(ToolSettings()) for spec in SPECS]
    return ToolRegistry(made, {spec.name: spec.needs for spec in SPECS})


def observations(body: dict[str, object]) -> list[str]:
    messages = body["messages"]
    assert isinstance(messages, list)
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_the_model_browses_through_the_registry(
    tmp_path: Path, fake_llm: FakeOpenAI, pool: BrowserPool, site: Site
) -> None:
    # the refs of a page are the same on every load: learn the link's from a probe session
    probe = pool.browse(BrowserRequest("probe", "navigate", url=site.url), lambda: False).text
    link = re.search(r'link "Go to the next page" \[ref=(e\d+)\]', probe)
    assert link is not None
    fake_llm.push(
        tool_calls(("browser_navigate", {"url": site.url})),
        tool_calls(("browser_click", {"ref": link.group(1)})),
        tool_calls(("browser_screenshot", {"path": "shots/next.png"})),
        text("done"),
    )
    llm = LLMClient(LLMSettings(fake_llm.base_url, "sk-fake", "m", stream=True, max_retries=0))
    # the host offers more than the browser; the registry narrows it to what the specs need
    host = ToolHost(browse=pool.browse, search_history=lambda *a: [])
    agent = AIAgent(
        llm, registry(), system_prompt="SYS", workspace=tmp_path, session_key="chat", host=host
    )
    result = agent.run_conversation("open the site and follow the link")
    assert result.text == "done", result.error
    seen = observations(fake_llm.requests[-1])
    assert "Home" in seen[0] and f"[ref={link.group(1)}]" in seen[0]
    assert "You followed the link" in seen[1]
    assert "Screenshot saved to shots/next.png" in seen[2]
    assert sniff_image((tmp_path / "shots" / "next.png").read_bytes()) == "image/png"
    tools = [t["function"]["name"] for t in fake_llm.requests[0]["tools"]]
    assert sorted(tools) == sorted(spec.name for spec in SPECS)


def test_without_a_browser_the_tools_say_so(tmp_path: Path) -> None:
    from tools.registry import ToolContext

    ctx = ToolContext(workspace=tmp_path, session_key="chat", host=ToolHost())
    outcome = registry().dispatch("browser_navigate", '{"url": "https://example.org"}', ctx)
    assert not outcome.ok and outcome.content == "Error: no browser is available here"
