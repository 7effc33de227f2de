"""What a server's listing may become: names that collide with nothing, schemas checked and
bounded, bounded descriptions, result text; the line cap in front of a stdio server; the MCP
config's checks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from hermes_gateway.config.schema import McpConfig
from hermes_gateway.mcp.naming import (
    MAX_NAME,
    check_schema,
    description,
    model_name,
    result_text,
    wanted,
)
from tools.linecap import relay


def test_names_are_prefixed_safe_and_bounded() -> None:
    assert model_name("gh", "create_issue") == "mcp_gh_create_issue"
    assert model_name("gh", "terminal") == "mcp_gh_terminal"  # never a built-in's name
    odd = model_name("gh", "repo.list/all")
    assert odd.startswith("mcp_gh_repo_list_all_") and len(odd) <= MAX_NAME
    long_a, long_b = model_name("gh", "x" * 100 + "a"), model_name("gh", "x" * 100 + "b")
    assert len(long_a) == len(long_b) == MAX_NAME and long_a != long_b
    # two names that become the same once made safe stay apart
    assert model_name("gh", "a.b") != model_name("gh", "a/b")


def test_include_and_exclude_take_patterns() -> None:
    assert wanted("read_x", (), ())
    assert wanted("read_x", ("read_*",), ()) and not wanted("write_x", ("read_*",), ())
    assert not wanted("read_secret", ("read_*",), ("*secret*",))


def deep(levels: int) -> dict[str, object]:
    node: dict[str, object] = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"a": node}}
    return node


def test_schemas_are_checked_and_bounded() -> None:
    assert check_schema({"type": "object", "properties": {"q": {"type": "string"}}}) is None
    assert check_schema({}) is None  # no type: an object
    assert "not an object" in (check_schema(["x"]) or "")
    assert "of type 'string'" in (check_schema({"type": "string"}) or "")
    assert "nested" in (check_schema(deep(30)) or "")
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}
    assert "bytes" in (check_schema(wide) or "")
    # a schema nested past the interpreter's recursion limit is refused, not a crash
    assert check_schema(deep(5000)) is not None


def test_descriptions_name_the_server_and_are_bounded() -> None:
    said = description("gh", "Lists\n\nissues " + "y" * 5000)
    assert said.startswith("[MCP server gh] Lists issues y") and len(said) < 1100


def test_result_text_keeps_text_and_names_the_rest() -> None:
    blocks = [
        SimpleNamespace(type="text", text="hello"),
        SimpleNamespace(type="image", data="QUJD" * 10, mime_type="image/png"),
        SimpleNamespace(type="resource", resource=SimpleNamespace(text="file body", uri="f://x")),
    ]
    out = result_text(blocks)
    assert out.splitlines() == ["hello", "[image (image/png, 30 bytes) omitted]", "file body"]
    assert result_text([], {"n": 1}) == '{"n": 1}'


def test_the_line_cap_cuts_long_lines_and_passes_the_rest() -> None:
    source_r, source_w = os.pipe()
    sink_r, sink_w = os.pipe()
    out = bytearray()

    def read() -> None:
        while chunk := os.read(sink_r, 65536):
            out.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    feeder = threading.Thread(
        target=lambda: (
            os.write(source_w, b"short\n" + b"x" * 300_000 + b"\nafter\n"),
            os.close(source_w),
        )
    )
    feeder.start()
    relay(source_r, sink_w, 1000)
    feeder.join()
    os.close(sink_w)
    reader.join()
    assert bytes(out) == b"short\n" + b"x" * 1000 + b"\nafter\n"


def test_the_config_takes_one_transport_and_safe_names() -> None:
    McpConfig.model_validate({"servers": {"gh": {"url": "https://example.com/mcp"}}})
    with pytest.raises(ValidationError, match="either command"):
        McpConfig.model_validate({"servers": {"gh": {"url": "https://x/mcp", "command": "y"}}})
    with pytest.raises(ValidationError, match="server name"):
        McpConfig.model_validate({"servers": {"Bad-Name": {"command": "x"}}})
    with pytest.raises(ValidationError, match="extra"):
        McpConfig.model_validate({"servers": {"gh": {"command": "x", "colour": "red"}}})


def test_a_gateway_without_mcp_servers_never_imports_the_sdk(tmp_path: Path) -> None:
    """No server configured: building the gateway (and what the start preloads) leaves the
    SDK and this package unimported, so cold start and idle memory stay as they were."""
    script = (
        "import sys\n"
        "from hermes_gateway.config import load_config\n"
        "from hermes_gateway.cli.preload import preload\n"
        "from hermes_gateway.server import Gateway\n"
        f"config = load_config(None, {{'HOME': {str(tmp_path)!r}}})\n"
        "preload(config)\n"
        "Gateway(config)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', "
        "'httpx2', 'jsonschema') or m.startswith('hermes_gateway.mcp')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_header_values_and_secret_env_values_are_hidden_from_the_log() -> None:
    from hermes_gateway.config.schema import Config

    config = Config.model_validate(
        {
            "mcp": {
                "servers": {
                    "gh": {"url": "https://x/mcp", "headers": {"Authorization": "Bearer abc123"}},
                    "fs": {"command": "x", "env": {"GH_TOKEN": "ghp_secret", "MODE": "fast"}},
                }
            }
        }
    )
    secrets = config.secrets()
    assert "Bearer abc123" in secrets and "ghp_secret" in secrets
    assert "fast" not in secrets
