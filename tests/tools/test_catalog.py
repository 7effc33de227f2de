"""Every built-in tool: built by name, a precise schema, and its config keys validated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.config import load_config
from hermes_gateway.errors import ConfigError
from tools.catalog import ToolSettings, build_registry, tool_names


def _nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(d for v in node.values() for d in _nodes(v))]
    if isinstance(node, list):
        return [d for v in node for d in _nodes(v)]
    return []


def test_every_builtin_builds_with_a_precise_schema(tmp_path: Path) -> None:
    registry = build_registry(tool_names(), ToolSettings(home=tmp_path))
    assert registry.names == list(tool_names())
    for spec in registry.specs():
        function = spec["function"]
        params = function["parameters"]
        assert len(function["description"]) > 40, function["name"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        for name, prop in params["properties"].items():
            assert prop.get("description"), f"{function['name']}.{name} has no description"
        assert not [n for n in _nodes(params) if isinstance(n.get("title"), str)]
    json.dumps(registry.specs())
    safe = {n for n in tool_names() if registry.is_parallel_safe(n)}
    assert safe == {
        "read_file",
        "search_files",
        "web_search",
        "web_extract",
        "vision_analyze",
        "session_search",
        "skills_list",
        "skill_view",
        "hindsight_recall",
        "hindsight_reflect",
    }


@pytest.mark.parametrize(
    ("yaml_text", "key", "needle"),
    [
        ("tools:\n  enabled: [read_file, rm_rf]\n", "tools.enabled", "unknown tool 'rm_rf'"),
        ("tools:\n  platforms: {irc: [read_file]}\n", "tools.platforms", "unknown platform"),
        ("tools:\n  platforms: {slack: [nope]}\n", "tools.platforms", "unknown tool 'nope'"),
        ("tools:\n  web: {search_url: 'ftp://x'}\n", "tools.web.search_url", "http(s) URL"),
        ("tools:\n  web: {allowed_networks: [banana]}\n", "tools.web.allowed_networks", "CIDR"),
        ("tools:\n  terminal: {approval: maybe}\n", "tools.terminal.approval", "off, dangerous"),
        ("tools:\n  delegate: {max_depth: 0}\n", "tools.delegate.max_depth", "greater than"),
        ("model:\n  context_budget: -1\n", "model.context_budget", "greater than"),
    ],
)
def test_bad_tool_config_names_the_key(
    tmp_path: Path, yaml_text: str, key: str, needle: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, {"HOME": str(tmp_path)})
    assert caught.value.key == key and needle in str(caught.value)


def test_per_platform_toolsets(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("tools:\n  enabled: [read_file, memory]\n  platforms: {slack: [memory]}\n")
    tools = load_config(path, {"HOME": str(tmp_path)}).tools
    assert tools.enabled_for("slack") == ("memory",)
    assert tools.enabled_for("telegram") == ("read_file", "memory")
