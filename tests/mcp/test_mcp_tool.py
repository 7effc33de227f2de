"""`McpTool` through the registry, with a caller standing in for the server: the arguments
checked against the server's schema, approval asked where configured (and its answer obeyed),
the registry's live view following the servers' lists."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_gateway.mcp.naming import Listed
from hermes_gateway.mcp.tool import LiveTools, McpTool
from tools.host import ApprovalRequest, ToolHost
from tools.registry import Tool, ToolContext, ToolRegistry

SCHEMA = {
    "type": "object",
    "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}},
    "required": ["q"],
}


class Server:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(
        self, server: str, tool: str, args: dict[str, Any], stop: Callable[[], bool]
    ) -> str:
        self.calls.append((server, tool, args))
        return f"ran {tool}"


def tool(server: Server, asks: bool = False) -> McpTool:
    listed = Listed("mcp_s_find", "find", "[MCP server s] finds", SCHEMA)
    return McpTool("s", listed, server, asks)


def context(tmp_path: Path, answer: bool | None) -> tuple[ToolContext, list[ApprovalRequest]]:
    asked: list[ApprovalRequest] = []

    def ask(request: ApprovalRequest, stop: Callable[[], bool]) -> bool:
        asked.append(request)
        return bool(answer)

    host = ToolHost(ask_approval=ask if answer is not None else None)
    return ToolContext(workspace=tmp_path, session_key="api:dm:1", host=host), asked


def test_arguments_are_checked_before_the_server_is_called(tmp_path: Path) -> None:
    server = Server()
    registry = ToolRegistry().extended([tool(server)], frozenset({"approvals"}))
    ctx, _ = context(tmp_path, None)
    bad = registry.dispatch("mcp_s_find", '{"q": 7}', ctx)
    missing = registry.dispatch("mcp_s_find", "{}", ctx)
    # the server's own regular expression is not run here (it could take the thread hostage)
    good = registry.dispatch("mcp_s_find", '{"q": "' + "a" * 40 + '!"}', ctx)
    assert not bad.ok and "7 is not of type 'string'" in bad.content
    assert not missing.ok and "'q' is a required property" in missing.content
    assert good.ok and good.content == "ran find"
    assert server.calls == [("s", "find", {"q": "a" * 40 + "!"})]


def test_approval_is_asked_and_a_denial_keeps_the_call_from_the_server(tmp_path: Path) -> None:
    server = Server()
    registry = ToolRegistry().extended([tool(server, asks=True)], frozenset({"approvals"}))
    denied_ctx, asked = context(tmp_path, False)
    denied = registry.dispatch("mcp_s_find", '{"q": "x"}', denied_ctx)
    approved_ctx, asked_again = context(tmp_path, True)
    approved = registry.dispatch("mcp_s_find", '{"q": "y"}', approved_ctx)
    assert not denied.ok and "did not approve this tool call" in denied.content
    assert [r.tool for r in asked] == ["mcp_s_find"] and '"q": "x"' in asked[0].action
    assert asked_again and approved.ok
    assert server.calls == [("s", "find", {"q": "y"})]


def test_the_live_view_follows_the_servers_lists(tmp_path: Path) -> None:
    server = Server()
    current: list[tuple[int, list[Tool]]] = [(0, [])]
    live = LiveTools(ToolRegistry(), lambda: current[-1])
    assert live.names == []
    current.append((1, [tool(server)]))
    assert live.names == ["mcp_s_find"]
    assert [s["function"]["name"] for s in live.specs()] == ["mcp_s_find"]
    assert json.loads(live.specs_json()) == live.specs()  # what the request carries
    ctx, _ = context(tmp_path, None)
    assert live.dispatch("mcp_s_find", '{"q": "z"}', ctx).content == "ran find"
    current.append((2, []))
    assert not live.dispatch("mcp_s_find", '{"q": "z"}', ctx).ok
    assert json.loads(live.specs_json()) == []


def test_the_live_view_answers_every_question_a_registry_does() -> None:
    """Each public method of a registry is the live registry's own, asked of the registry of
    the moment: one inherited would answer from the live view's own empty registry."""
    public = {
        name
        for name, value in vars(ToolRegistry).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }
    assert public - set(vars(LiveTools)) == set()
