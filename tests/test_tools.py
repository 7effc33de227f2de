"""The tool registry (dispatch never raises, schemas for the model) and `read_file`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from tools import ToolContext, ToolRegistry, default_registry
from tools.errors import ToolError
from tools.registry import ModelTool


class EchoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="What to say back.")
    times: int = Field(1, ge=1, le=5, description="How often.")


class EchoTool(ModelTool):
    name = "echo"
    description = "Say the text back."
    Args = EchoArgs

    def call(self, args: EchoArgs, ctx: ToolContext) -> str:
        if args.text == "explode":
            raise KeyError("wires")
        if args.text == "refuse":
            raise ToolError("cannot echo that")
        return args.text * args.times


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolContext(workspace=workspace, max_output_chars=1000)


@pytest.fixture
def registry() -> ToolRegistry:
    registry = default_registry(["read_file"])
    registry.register(EchoTool())
    return registry


class TestDispatch:
    def test_valid_call(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        outcome = registry.dispatch("echo", '{"text": "ab", "times": 2}', ctx)
        assert (outcome.content, outcome.ok) == ("abab", True)
        assert outcome.duration_s >= 0

    def test_unknown_tool_lists_the_tools(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        outcome = registry.dispatch("rm_rf", "{}", ctx)
        assert not outcome.ok
        assert outcome.content == "Error: unknown tool 'rm_rf'. Available tools: read_file, echo."

    def test_invalid_json(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        outcome = registry.dispatch("echo", '{"text": "a",', ctx)
        assert not outcome.ok
        assert outcome.content.startswith("Error: arguments for echo are not valid JSON")

    @pytest.mark.parametrize("raw", ['["a"]', '"text"', "42", "null"])
    def test_non_object_arguments(self, registry: ToolRegistry, ctx: ToolContext, raw: str) -> None:
        outcome = registry.dispatch("echo", raw, ctx)
        assert (outcome.content, outcome.ok) == (
            "Error: arguments for echo must be a JSON object.",
            False,
        )

    def test_validation_error_names_the_field(
        self, registry: ToolRegistry, ctx: ToolContext
    ) -> None:
        outcome = registry.dispatch("echo", '{"text": "a", "times": 9, "loud": true}', ctx)
        assert not outcome.ok
        assert outcome.content.startswith("Error: invalid arguments for echo: ")
        assert "times: Input should be less than or equal to 5" in outcome.content
        assert "loud: Extra inputs are not permitted" in outcome.content

    def test_missing_field_and_empty_arguments(
        self, registry: ToolRegistry, ctx: ToolContext
    ) -> None:
        outcome = registry.dispatch("echo", "  ", ctx)
        assert not outcome.ok
        assert "text: Field required" in outcome.content

    def test_tool_error_becomes_its_message(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        outcome = registry.dispatch("echo", '{"text": "refuse"}', ctx)
        assert (outcome.content, outcome.ok) == ("Error: cannot echo that", False)

    def test_crashing_tool_becomes_an_error_observation(
        self, registry: ToolRegistry, ctx: ToolContext
    ) -> None:
        outcome = registry.dispatch("echo", '{"text": "explode"}', ctx)
        assert (outcome.content, outcome.ok) == ("Error: echo failed: KeyError: 'wires'", False)

    def test_output_is_capped_with_a_note(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        text = "x" * 400
        outcome = registry.dispatch("echo", json.dumps({"text": text, "times": 5}), ctx)
        assert outcome.ok
        assert outcome.content == "x" * 1000 + "\n[output truncated: 1000 more characters]"

    def test_output_at_the_cap_is_untouched(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        outcome = registry.dispatch("echo", json.dumps({"text": "y" * 500, "times": 2}), ctx)
        assert outcome.content == "y" * 1000

    def test_registering_a_name_twice_fails(self, registry: ToolRegistry) -> None:
        with pytest.raises(ValueError, match="registered twice"):
            registry.register(EchoTool())

    def test_default_registry_rejects_unknown_names(self) -> None:
        with pytest.raises(KeyError):
            default_registry(["read_file", "no_such_tool"])


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(d for v in node.values() for d in _walk(v))]
    if isinstance(node, list):
        return [d for v in node for d in _walk(v)]
    return []


class TestSpecs:
    def test_openai_function_tool_shape(self, registry: ToolRegistry) -> None:
        specs = registry.specs()
        assert [s["function"]["name"] for s in specs] == ["read_file", "echo"]
        for spec in specs:
            assert set(spec) == {"type", "function"}
            assert spec["type"] == "function"
            assert set(spec["function"]) == {"name", "description", "parameters"}
            params = spec["function"]["parameters"]
            assert params["type"] == "object"
            assert params["additionalProperties"] is False
            assert all(isinstance(p.get("description"), str) for p in params["properties"].values())
            assert all("title" not in node for node in _walk(params))
        json.dumps(specs)  # serializable as the request body

    def test_encoded_specs_follow_the_tools(self, registry: ToolRegistry) -> None:
        """The request's tools array, encoded once, and again when the tools change."""
        first = registry.specs_json()
        assert json.loads(first) == registry.specs()
        assert registry.specs_json() is first  # not encoded per call
        narrowed = registry.subset(["echo"])
        assert [s["function"]["name"] for s in json.loads(narrowed.specs_json())] == ["echo"]

        class LaterTool(EchoTool):
            name: ClassVar[str] = "later"

        joined = registry.extended([LaterTool()], frozenset())
        assert [s["function"]["name"] for s in json.loads(joined.specs_json())] == [
            "read_file",
            "echo",
            "later",
        ]
        registry.register(LaterTool())
        assert json.loads(registry.specs_json()) == registry.specs()
        assert len(registry.specs()) == 3

    def test_read_file_schema(self, registry: ToolRegistry) -> None:
        params = registry.specs()[0]["function"]["parameters"]
        assert params["required"] == ["path"]
        assert set(params["properties"]) == {"path", "start_line", "max_lines"}
        assert params["properties"]["start_line"] == {
            "default": 1,
            "description": "First line to return, 1-based. Default 1.",
            "minimum": 1,
            "type": "integer",
        }
        assert registry.is_parallel_safe("read_file")
        assert not registry.is_parallel_safe("nope")

    def test_nested_model_schema_has_no_titles(self) -> None:
        class Inner(BaseModel):
            name: str = Field(description="A name.")

        class NestedArgs(BaseModel):
            items: list[Inner] = Field(description="Things.")

        class NestedTool(ModelTool):
            name: ClassVar[str] = "nested"
            description: ClassVar[str] = "Takes nested things."
            Args = NestedArgs

        params = ToolRegistry([NestedTool()]).specs()[0]["function"]["parameters"]
        assert [node["title"] for node in _walk(params) if "title" in node] == []


def _read(registry: ToolRegistry, ctx: ToolContext, **args: Any) -> tuple[str, bool]:
    outcome = registry.dispatch("read_file", json.dumps(args), ctx)
    return outcome.content, outcome.ok


class TestReadFile:
    def test_numbered_lines(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        (ctx.workspace / "notes.md").write_text("alpha\nbeta\n")
        assert _read(registry, ctx, path="notes.md") == ("1| alpha\n2| beta", True)

    def test_line_range_and_more_lines_hint(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        (ctx.workspace / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
        content, ok = _read(registry, ctx, path="n.txt", start_line=3, max_lines=2)
        assert ok
        assert content == "3| line 3\n4| line 4\n[6 more lines; continue with start_line=5]"
        content, _ = _read(registry, ctx, path="n.txt", start_line=9, max_lines=5)
        assert content == "9| line 9\n10| line 10"

    def test_start_line_past_the_end(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        (ctx.workspace / "n.txt").write_text("one\n")
        assert _read(registry, ctx, path="n.txt", start_line=5) == (
            "Error: start_line 5 is past the end (1 lines)",
            False,
        )

    @pytest.mark.parametrize("raw", ["  sub/n.txt \n", "'sub/n.txt'", '"sub/n.txt"', "`sub/n.txt`"])
    def test_whitespace_and_quotes_stripped(
        self, registry: ToolRegistry, ctx: ToolContext, raw: str
    ) -> None:
        (ctx.workspace / "sub").mkdir()
        (ctx.workspace / "sub" / "n.txt").write_text("ok\n")
        assert _read(registry, ctx, path=raw) == ("1| ok", True)

    def test_absolute_path_inside_the_workspace(
        self, registry: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "n.txt").write_text("ok\n")
        assert _read(registry, ctx, path=str(ctx.workspace / "n.txt")) == ("1| ok", True)

    @pytest.mark.parametrize("raw", ["../secret.txt", "sub/../../secret.txt", "/etc/passwd"])
    def test_paths_outside_are_refused(
        self, registry: ToolRegistry, ctx: ToolContext, raw: str
    ) -> None:
        (ctx.workspace.parent / "secret.txt").write_text("top secret\n")
        content, ok = _read(registry, ctx, path=raw)
        assert not ok
        assert content == (
            f"Error: path {raw!r} is outside the workspace; use a path relative to the workspace"
        )

    def test_symlink_pointing_outside_is_refused(
        self, registry: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace.parent / "secret.txt").write_text("top secret\n")
        os.symlink(ctx.workspace.parent / "secret.txt", ctx.workspace / "link.txt")
        content, ok = _read(registry, ctx, path="link.txt")
        assert not ok
        assert "outside the workspace" in content
        assert "top secret" not in content

    def test_symlink_inside_the_workspace_is_followed(
        self, registry: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "real.txt").write_text("inside\n")
        os.symlink(ctx.workspace / "real.txt", ctx.workspace / "link.txt")
        assert _read(registry, ctx, path="link.txt") == ("1| inside", True)

    def test_directory(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        (ctx.workspace / "docs").mkdir()
        assert _read(registry, ctx, path="docs") == (
            "Error: 'docs' is a directory, not a file",
            False,
        )

    def test_missing_file(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        assert _read(registry, ctx, path=" nope.txt ") == (
            "Error: file 'nope.txt' does not exist",
            False,
        )

    def test_binary_file(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        (ctx.workspace / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
        assert _read(registry, ctx, path="img.png") == (
            "Error: 'img.png' looks like a binary file",
            False,
        )

    def test_empty_file(self, registry: ToolRegistry, ctx: ToolContext) -> None:
        (ctx.workspace / "empty.txt").write_text("")
        assert _read(registry, ctx, path="empty.txt") == ("(empty file)", True)

    @pytest.mark.parametrize("raw", ["", "   ", "''"])
    def test_empty_path(self, registry: ToolRegistry, ctx: ToolContext, raw: str) -> None:
        content, ok = _read(registry, ctx, path=raw)
        assert not ok
        assert "path" in content

    def test_invalid_utf8_is_replaced_not_fatal(
        self, registry: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "latin1.txt").write_bytes("café\n".encode("latin-1"))
        assert _read(registry, ctx, path="latin1.txt") == ("1| caf\ufffd", True)
