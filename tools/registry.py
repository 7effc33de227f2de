"""The tool registry: JSON schemas for the model, argument validation, dispatch, output caps.

A call never raises out of `ToolRegistry.dispatch`: bad JSON, an unknown tool, invalid
arguments and a failing tool all become error observations the model can read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from tools.errors import ToolError
from tools.host import DelegateRequest, ToolHost, narrowed


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about the run it serves."""

    workspace: Path
    session_key: str = ""
    max_output_chars: int = 50_000
    should_stop: Callable[[], bool] = field(default=lambda: False)
    host: ToolHost = field(default_factory=ToolHost)  # the gateway's services
    # set by the agent: run a child agent on this thread and return its summary
    delegate: Callable[[DelegateRequest], str] | None = None
    depth: int = 0  # 0 for a session's agent, 1 for its child, ...


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One observation for the model; `ok` is False for every kind of failure."""

    content: str
    ok: bool
    duration_s: float = 0.0


@runtime_checkable
class Tool(Protocol):
    """A synchronous capability the model can call."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parallel_safe(self) -> bool: ...

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments object."""
        ...

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        """Run with validated arguments; raise `ToolError` for a failure the model can fix."""
        ...


class ModelTool:
    """Base for tools whose arguments are a pydantic model: one source for schema and checks."""

    name: ClassVar[str]
    description: ClassVar[str]
    parallel_safe: ClassVar[bool] = True
    Args: ClassVar[type[BaseModel]]

    def parameters(self) -> dict[str, Any]:
        return _clean_schema(self.Args.model_json_schema())

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        return self.call(self.Args.model_validate(arguments), ctx)

    def call(self, args: Any, ctx: ToolContext) -> str:
        raise NotImplementedError


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's `title` noise at every depth; models read descriptions, not titles."""
    cleaned: dict[str, Any] = _without_titles(schema)
    cleaned.setdefault("additionalProperties", False)
    return cleaned


def _without_titles(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            # under "properties" the keys are field names (a field may be called "title")
            out[key] = (
                {k: _without_titles(v) for k, v in value.items()}
                if key in ("properties", "$defs") and isinstance(value, dict)
                else _without_titles(value)
            )
        return out
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


class ToolRegistry:
    """Holds the enabled tools and turns a model's tool call into an observation.

    ``needs``: tool name -> the host services it declared (`tools.spec.ToolSpec.needs`); such
    a tool's calls see only those. A tool not named there (one built by hand) sees them all.
    """

    def __init__(
        self, tools: Iterable[Tool] = (), needs: Mapping[str, frozenset[str]] | None = None
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._specs: list[dict[str, Any]] = []
        self._specs_json: bytes | None = None  # `specs` encoded, on first use
        self._needs = dict(needs or {})
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool
        self._specs_json = None
        self._specs.append(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters(),
                },
            }
        )

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """The `tools` array for the chat completions request (built once, reused)."""
        return self._specs

    def specs_json(self) -> bytes:
        """`specs` as the request carries it, compact UTF-8 JSON, encoded once: every turn
        of every session sends it, and a thousand turns starting at once each encoding a
        few kilobytes of schemas would be a tenth of their CPU."""
        if self._specs_json is None:
            self._specs_json = json.dumps(
                self._specs, ensure_ascii=False, separators=(",", ":")
            ).encode()
        return self._specs_json

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry of the named tools that this one holds (others are left out). A tool
        that reaches other tools (`execute_code`) is narrowed to the subset too."""
        kept = [n for n in dict.fromkeys(names) if n in self._tools]
        return ToolRegistry((_narrowed(self._tools[n], kept) for n in kept), self._needs)

    def extended(self, tools: Iterable[Tool], needs: frozenset[str]) -> ToolRegistry:
        """This registry and ``tools`` (each seeing only the host services of ``needs``): tools
        that come and go while the gateway runs (an MCP server's) join a session's own."""
        joined = ToolRegistry((), self._needs)
        joined._tools, joined._specs = dict(self._tools), list(self._specs)
        for tool in tools:
            joined.register(tool)
            joined._needs[tool.name] = needs
        return joined

    def is_parallel_safe(self, name: str) -> bool:
        tool = self._tools.get(name)
        return bool(tool and tool.parallel_safe)

    def dispatch(self, name: str, raw_arguments: str, ctx: ToolContext) -> ToolOutcome:
        started = time.monotonic()
        content, ok = self._dispatch(name, raw_arguments, ctx)
        limit = ctx.max_output_chars
        if len(content) > limit:
            dropped = len(content) - limit
            content = content[:limit] + f"\n[output truncated: {dropped} more characters]"
        return ToolOutcome(content, ok, time.monotonic() - started)

    def _dispatch(self, name: str, raw_arguments: str, ctx: ToolContext) -> tuple[str, bool]:
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return f"Error: unknown tool {name!r}. Available tools: {known}.", False
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return f"Error: arguments for {name} are not valid JSON ({exc.msg}).", False
        if not isinstance(arguments, dict):
            return f"Error: arguments for {name} must be a JSON object.", False
        needs = self._needs.get(name)
        if needs is not None:
            ctx = _within(ctx, needs)
        try:
            return tool.run(arguments, ctx), True
        except ValidationError as exc:
            return f"Error: invalid arguments for {name}: {_describe(exc)}", False
        except ToolError as exc:
            return f"Error: {exc}", False
        except Exception as exc:  # a tool bug must not end the conversation
            return f"Error: {name} failed: {type(exc).__name__}: {exc}", False


def _within(ctx: ToolContext, needs: frozenset[str]) -> ToolContext:
    """The context a tool that declared ``needs`` runs with: no service it did not ask for."""
    delegate = ctx.delegate if "delegation" in needs or "tools" in needs else None
    return replace(ctx, host=narrowed(ctx.host, needs), delegate=delegate)


def _narrowed(tool: Tool, names: list[str]) -> Tool:
    narrow: Callable[[list[str]], Tool] | None = getattr(tool, "narrowed", None)
    return narrow(names) if narrow is not None else tool


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def default_registry(enabled: Iterable[str]) -> ToolRegistry:
    """The registry of the named built-in tools with default settings (unknown names raise
    `KeyError`); the gateway uses `tools.catalog.build_registry` with its config."""
    from tools.catalog import ToolSettings, build_registry

    return build_registry(enabled, ToolSettings())
