"""What a server's tool listing is allowed to become: a model-facing name that collides with
nothing (`mcp_<server>_<tool>`), a schema checked and bounded, a bounded description; and the
text of a call's result. Pure functions: a hostile listing is judged here, before the model
or the registry sees any of it."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

MAX_NAME = 64  # what chat completions accept of a function name
MAX_DESCRIPTION = 1024
MAX_SCHEMA_BYTES = 32 * 1024
MAX_SCHEMA_DEPTH = 12
MAX_SCHEMA_NODES = 2000
_INVALID = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class Listed:
    """One tool of a server as the model will see it."""

    name: str  # mcp_<server>_<tool>
    tool: str  # the server's own name, used in calls
    description: str
    schema: dict[str, Any]


def model_name(server: str, tool: str) -> str:
    """``mcp_<server>_<tool>`` with what a function name may not hold made ``_``; a name past
    64 characters is cut and ends with a hash of the whole, so two long names stay apart."""
    name = _INVALID.sub("_", f"mcp_{server}_{tool}")
    if len(name) <= MAX_NAME and name == f"mcp_{server}_{tool}":
        return name
    digest = base64.b32encode(hashlib.sha1(tool.encode()).digest()).decode().lower()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def wanted(tool: str, include: Iterable[str], exclude: Iterable[str]) -> bool:
    """`tools.include` (empty: every tool) less `tools.exclude`; shell-style patterns."""
    inc = list(include)
    if inc and not any(fnmatchcase(tool, p) for p in inc):
        return False
    return not any(fnmatchcase(tool, p) for p in exclude)


def check_schema(schema: Any) -> str | None:
    """Why ``schema`` cannot be a tool's arguments, or None: an object schema, at most
    `MAX_SCHEMA_BYTES` as JSON, `MAX_SCHEMA_DEPTH` deep and `MAX_SCHEMA_NODES` in all."""
    if not isinstance(schema, Mapping):
        return "its input schema is not an object"
    if schema.get("type", "object") != "object":
        return f"its input schema is of type {schema.get('type')!r}, not object"
    try:
        size = len(json.dumps(schema, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError):
        return "its input schema is not plain JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"its input schema is {size} bytes (at most {MAX_SCHEMA_BYTES})"
    depth, nodes = _measure(schema)
    if depth > MAX_SCHEMA_DEPTH:
        return f"its input schema is nested {depth} deep (at most {MAX_SCHEMA_DEPTH})"
    if nodes > MAX_SCHEMA_NODES:
        return f"its input schema has {nodes} parts (at most {MAX_SCHEMA_NODES})"
    return None


def _measure(node: Any) -> tuple[int, int]:
    """(depth, node count) of a JSON value, without recursion (the value may be deep)."""
    deepest, count = 0, 0
    todo: list[tuple[Any, int]] = [(node, 1)]
    while todo:
        value, depth = todo.pop()
        count += 1
        deepest = max(deepest, depth)
        if isinstance(value, Mapping):
            todo.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)
    return deepest, count


def model_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as the model gets it: an object, with `properties` present."""
    out = dict(schema)
    out["type"] = "object"
    out.setdefault("properties", {})
    return out


def description(server: str, text: str | None) -> str:
    """Whose tool it is, then the server's words, bounded."""
    words = " ".join((text or "").split())
    if len(words) > MAX_DESCRIPTION:
        words = words[: MAX_DESCRIPTION - 3] + "..."
    return f"[MCP server {server}] {words}".strip()


def result_text(content: Iterable[Any], structured: Any = None) -> str:
    """A call's content blocks as text for the model: text as it is, a text resource's text,
    other kinds named with their size (no image reaches the model through a tool result)."""
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            uri = getattr(resource, "uri", "")
            parts.append(str(text) if text is not None else f"[binary resource {uri} omitted]")
        elif kind in ("image", "audio"):
            data = str(getattr(block, "data", ""))
            mime = getattr(block, "mime_type", "") or kind
            parts.append(f"[{kind} ({mime}, {len(data) * 3 // 4} bytes) omitted]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(block, 'uri', '')}]")
        else:
            parts.append(f"[{kind or 'unknown'} content omitted]")
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(parts)
