"""`McpTool`: one tool of an MCP server as the registry holds it (arguments checked against
its schema, approval asked where the server's config says, long output spilled to a file),
and `LiveTools`, a session's registry whose MCP part follows the servers' tool lists."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jsonschema

from hermes_gateway.mcp.naming import Listed
from tools.approval import approve
from tools.errors import ToolError
from tools.host import ApprovalRequest
from tools.registry import Tool, ToolContext, ToolOutcome, ToolRegistry

# what an MCP tool's calls may use of the gateway: asking for approval, nothing else
NEEDS = frozenset({"approvals"})
# keywords left out of the argument check: a server's regular expression could take the
# worker thread hostage (the server checks its own arguments anyway)
_UNCHECKED = frozenset({"pattern", "patternProperties", "format", "$schema", "$id"})
SPILL_DIR = "mcp-output"

# call(server, tool, arguments, should_stop) -> the result's text; raises ToolError
Caller = Callable[[str, str, dict[str, Any], Callable[[], bool]], str]


class McpTool:
    """A synchronous tool whose `run` is a call on the server, through ``caller``."""

    parallel_safe = True

    def __init__(self, server: str, listed: Listed, caller: Caller, asks: bool) -> None:
        self.server = server
        self.listed = listed
        self.name = listed.name
        self.description = listed.description
        self._caller = caller
        self._asks = asks
        self._validator = jsonschema.Draft202012Validator(_checkable(listed.schema))

    def parameters(self) -> dict[str, Any]:
        return self.listed.schema

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        problems = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))[:5]
        if problems:
            said = "; ".join(
                f"{'.'.join(map(str, e.path)) or 'arguments'}: {e.message[:200]}" for e in problems
            )
            raise ToolError(f"invalid arguments for {self.name}: {said}")
        if self._asks:
            action = f"{self.name} {json.dumps(arguments, ensure_ascii=False)}"
            request = ApprovalRequest(
                ctx.session_key, self.name, action, f"a tool of MCP server {self.server}"
            )
            refused = approve(ctx.host, request, ctx.should_stop)
            if refused is not None:
                raise ToolError(refused.replace("command", "tool call"))
        text = self._caller(self.server, self.listed.tool, arguments, ctx.should_stop)
        return _spilled(text, ctx, self.name)


def _checkable(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without the keywords the argument check skips, at every depth."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in _UNCHECKED}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    cleaned: dict[str, Any] = strip(schema)
    return cleaned


def _spilled(text: str, ctx: ToolContext, name: str) -> str:
    """The text, or its head and where the whole of it was written (the workspace), when it is
    longer than the model may read at once."""
    limit = ctx.max_output_chars
    if len(text) <= limit:
        return text
    folder = ctx.workspace / SPILL_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{uuid.uuid4().hex[:8]}.txt"
    path.write_text(text, encoding="utf-8")
    note = (
        f"\n[output cut at {limit} of {len(text)} characters; the whole of it is in "
        f"{path.relative_to(ctx.workspace)} (read_file can page through it)]"
    )
    return text[: max(0, limit - len(note))] + note


class LiveTools(ToolRegistry):
    """A session's tools: its built-in registry and the MCP tools its chat may use now,
    rebuilt when a server's list changes (``source`` returns a version and the tools)."""

    def __init__(
        self, base: ToolRegistry, source: Callable[[], tuple[int, Sequence[Tool]]]
    ) -> None:
        super().__init__()
        self._base = base
        self._source = source
        self._seen = (-1, base)

    def _now(self) -> ToolRegistry:
        version, tools = self._source()
        seen, registry = self._seen
        if version != seen:
            registry = self._base.extended(tools, NEEDS) if tools else self._base
            self._seen = (version, registry)
        return registry

    def register(self, tool: Tool) -> None:
        raise TypeError("a session's live registry takes no tools")

    @property
    def names(self) -> list[str]:
        return self._now().names

    def specs(self) -> list[dict[str, Any]]:
        return self._now().specs()

    def specs_json(self) -> bytes:
        return self._now().specs_json()

    def get(self, name: str) -> Tool | None:
        return self._now().get(name)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        return self._now().subset(names)

    def extended(self, tools: Iterable[Tool], needs: frozenset[str]) -> ToolRegistry:
        return self._now().extended(tools, needs)

    def is_parallel_safe(self, name: str) -> bool:
        return self._now().is_parallel_safe(name)

    def dispatch(self, name: str, raw_arguments: str, ctx: ToolContext) -> ToolOutcome:
        return self._now().dispatch(name, raw_arguments, ctx)
