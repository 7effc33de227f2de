"""`write_file`, `patch` and `search_files`: behaviour, bad inputs and workspace confinement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools import ToolContext, ToolRegistry, default_registry
from tools.errors import ToolError
from tools.paths import resolve_in_workspace
from tools.search_files import SearchFilesTool

from .conftest import call


@pytest.fixture
def reg() -> ToolRegistry:
    return default_registry(["read_file", "write_file", "patch", "search_files"])


class TestWriteFile:
    def test_creates_parents_then_overwrites_then_appends(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        assert call(reg, ctx, "write_file", path=" a/b/c.txt ", content="one\ntwo\n") == (
            "Created a/b/c.txt (8 bytes, 2 lines).",
            True,
        )
        target = ctx.workspace / "a" / "b" / "c.txt"
        os.chmod(target, 0o600)
        assert call(reg, ctx, "write_file", path="a/b/c.txt", content="new")[0].startswith(
            "Overwrote"
        )
        assert call(reg, ctx, "write_file", path="a/b/c.txt", content="+", mode="append")[1]
        assert target.read_text() == "new+"
        assert target.stat().st_mode & 0o777 == 0o600  # the rename kept the permissions
        assert [p.name for p in target.parent.iterdir()] == ["c.txt"]  # no temp file left

    def test_refuses_directories_escapes_and_bad_modes(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "d").mkdir()
        assert call(reg, ctx, "write_file", path="d", content="x") == (
            "Error: 'd' is a directory, not a file",
            False,
        )
        content, ok = call(reg, ctx, "write_file", path="../evil.txt", content="x")
        assert not ok and "outside the workspace" in content
        assert not (ctx.workspace.parent / "evil.txt").exists()
        content, ok = call(reg, ctx, "write_file", path="x", content="y", mode="truncate")
        assert not ok and "mode: Input should be 'overwrite' or 'append'" in content
        content, ok = call(reg, ctx, "write_file", path="x", content=5)
        assert not ok and "content: Input should be a valid string" in content

    def test_a_dangling_symlink_out_is_not_written_through(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        outside = ctx.workspace.parent / "created_outside.txt"
        os.symlink(outside, ctx.workspace / "link.txt")
        content, ok = call(reg, ctx, "write_file", path="link.txt", content="x")
        assert not ok and not outside.exists()


FILE = "def greet(name):\n    return 'hi ' + name\n\n\ndef leave():\n    return 'bye'\n"


class TestPatch:
    def test_search_replace_edits(self, reg: ToolRegistry, ctx: ToolContext) -> None:
        (ctx.workspace / "m.py").write_text(FILE)
        edits = [
            {"old": "'hi ' + name", "new": "f'hello {name}'"},
            {"old": "return 'bye'", "new": "return 'see you'"},
        ]
        assert call(reg, ctx, "patch", path="m.py", edits=edits) == (
            "Patched m.py: 2 edit(s) applied.",
            True,
        )
        assert "f'hello {name}'" in (ctx.workspace / "m.py").read_text()
        assert "see you" in (ctx.workspace / "m.py").read_text()

    def test_a_missing_search_text_changes_nothing_and_shows_the_nearest(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "m.py").write_text(FILE)
        edits = [
            {"old": "return 'bye'", "new": "return 'ciao'"},
            {"old": "def greet(nam):", "new": "def greet(who):"},
        ]
        content, ok = call(reg, ctx, "patch", path="m.py", edits=edits)
        assert not ok
        assert content.startswith("Error: edit 2: 'old' text not found.")
        assert "closest text is at line 1" in content and "1| def greet(name):" in content
        assert (ctx.workspace / "m.py").read_text() == FILE  # all or nothing

    def test_an_ambiguous_search_text_names_its_lines(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "m.py").write_text(FILE)
        content, ok = call(reg, ctx, "patch", path="m.py", edits=[{"old": "return", "new": "r"}])
        assert not ok and "occurs 2 times (at lines 2, 6)" in content
        edit = {"old": "return", "new": "yield", "replace_all": True}
        assert call(reg, ctx, "patch", path="m.py", edits=[edit])[1]
        assert (ctx.workspace / "m.py").read_text().count("yield") == 2

    def test_unified_diff_with_drifted_line_numbers_and_crlf(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "m.py").write_bytes(FILE.replace("\n", "\r\n").encode())
        diff = (
            "--- a/m.py\n+++ b/m.py\n"
            "@@ -3,3 +3,3 @@\n"  # really at line 5: found by searching near it
            " def leave():\n-    return 'bye'\n+    return 'farewell'\n"
        )
        assert call(reg, ctx, "patch", path="m.py", diff=diff) == (
            "Patched m.py: 1 hunk(s) applied (+0 lines).",
            True,
        )
        data = (ctx.workspace / "m.py").read_bytes()
        assert b"return 'farewell'\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")

    def test_a_diff_whose_context_does_not_match_fails_clearly(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        (ctx.workspace / "m.py").write_text(FILE)
        diff = "@@ -5,2 +5,2 @@\n def leave():\n-    return 'adios'\n+    return 'x'\n"
        content, ok = call(reg, ctx, "patch", path="m.py", diff=diff)
        assert not ok
        assert content.startswith("Error: hunk 1 (@@ -5,2 +5,2 @@) does not match the file")
        assert "    return 'adios'" in content and "6|     return 'bye'" in content
        assert (ctx.workspace / "m.py").read_text() == FILE

    @pytest.mark.parametrize(
        ("args", "needle"),
        [
            ({"path": "m.py"}, "give exactly one of 'edits' or 'diff'"),
            ({"path": "m.py", "edits": [], "diff": "x"}, "edits: List should have at least 1"),
            ({"path": "m.py", "diff": "no hunks here"}, "the diff has no '@@"),
            ({"path": "m.py", "diff": "@@ -1 +1 @@\n?junk"}, "does not start with"),
            ({"path": "nope.py", "edits": [{"old": "a", "new": "b"}]}, "does not exist"),
            ({"path": "bin.dat", "edits": [{"old": "a", "new": "b"}]}, "binary or too large"),
        ],
    )
    def test_bad_inputs(
        self, reg: ToolRegistry, ctx: ToolContext, args: dict[str, object], needle: str
    ) -> None:
        (ctx.workspace / "m.py").write_text(FILE)
        (ctx.workspace / "bin.dat").write_bytes(b"a\x00b")
        content, ok = call(reg, ctx, "patch", **args)
        assert not ok and needle in content


class TestSearchFiles:
    @pytest.fixture(autouse=True)
    def tree(self, ctx: ToolContext) -> None:
        ws = ctx.workspace
        (ws / "src" / "pkg").mkdir(parents=True)
        (ws / "src" / "pkg" / "a.py").write_text("import os\ndef handler_one():\n    pass\n")
        (ws / "src" / "b.py").write_text("def Handler_two():\n    return 2\n")
        (ws / "notes.md").write_text("handler notes\n")
        (ws / ".git").mkdir()
        (ws / ".git" / "config").write_text("handler in git\n")
        (ws / "blob.bin").write_bytes(b"handler\x00\x01")
        (ws.parent / "outside.py").write_text("def handler_secret(): pass\n")
        os.symlink(ws.parent / "outside.py", ws / "src" / "link.py")

    def test_regex_with_glob_skips_hidden_binary_and_links_out(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        assert call(reg, ctx, "search_files", pattern=r"def \w+_one", glob="*.py") == (
            "src/pkg/a.py:2: def handler_one():",
            True,
        )
        content, _ = call(reg, ctx, "search_files", pattern="handler", case_sensitive=False)
        assert content.splitlines() == [
            "notes.md:1: handler notes",
            "src/b.py:1: def Handler_two():",
            "src/pkg/a.py:2: def handler_one():",
        ]

    def test_listing_files_by_glob_and_the_cap(self, reg: ToolRegistry, ctx: ToolContext) -> None:
        assert call(reg, ctx, "search_files", glob="*.py", path="src") == (
            "src/b.py\nsrc/pkg/a.py",
            True,
        )
        content, _ = call(reg, ctx, "search_files", pattern=".", max_results=2)
        assert content.endswith("[only the first 2 matches shown; narrow the search]")
        assert len(content.splitlines()) == 3

    @pytest.mark.parametrize(
        ("args", "needle"),
        [
            ({"pattern": "("}, "not a valid regular expression"),
            ({}, "give a regex 'pattern', a 'glob', or both"),
            ({"pattern": "x", "path": "notes.md"}, "is not a directory"),
            ({"pattern": "x", "path": ".."}, "outside the workspace"),
            ({"pattern": "x", "max_results": 0}, "greater than or equal to 1"),
        ],
    )
    def test_bad_inputs(
        self, reg: ToolRegistry, ctx: ToolContext, args: dict[str, object], needle: str
    ) -> None:
        content, ok = call(reg, ctx, "search_files", **args)
        assert not ok and needle in content

    def test_no_match(self, reg: ToolRegistry, ctx: ToolContext) -> None:
        assert call(reg, ctx, "search_files", pattern="zebra") == ("(no matches)", True)

    @pytest.mark.skipif(not __import__("shutil").which("rg"), reason="ripgrep not installed")
    def test_ripgrep_agrees_with_the_python_walk(self, ctx: ToolContext) -> None:
        import shutil

        rg, py = SearchFilesTool(shutil.which("rg")), SearchFilesTool(None)
        args = rg.Args.model_validate({"pattern": "handler", "glob": "*.py"})
        assert rg.call(args, ctx) == py.call(args, ctx)


# -- confinement, as properties ------------------------------------------------------------

SEGMENT = st.sampled_from(["a", "b", "..", ".", "", "link_out", "link_in", "loop", "x y"])
RAW = st.lists(SEGMENT, min_size=1, max_size=6).map("/".join)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("confine")
    ws = root / "ws"
    (ws / "a" / "b").mkdir(parents=True)
    (root / "secret").mkdir()
    os.symlink(root / "secret", ws / "link_out")
    os.symlink(ws / "a", ws / "link_in")
    os.symlink(ws / "loop", ws / "loop")
    return ws


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=RAW, pad=st.sampled_from(["", " ", "\n", "'", '"']), absolute=st.booleans())
def test_every_accepted_path_is_inside_the_workspace(
    sandbox: Path, raw: str, pad: str, absolute: bool
) -> None:
    text = f"{pad}{sandbox}/{raw}{pad}" if absolute else f"{pad}{raw}{pad}"
    parts = os.path.normpath(raw).split("/")
    leaves = parts[0] in ("..", "link_out", "loop")  # the links sit at the root
    root = sandbox.resolve()
    try:
        resolved = resolve_in_workspace(sandbox, text)
    except ToolError:
        return
    assert not leaves, f"{text!r} should have been refused, got {resolved}"
    assert resolved == root or root in resolved.parents
    # the answer is stable: resolving it again changes nothing, symlinks included
    assert resolve_in_workspace(sandbox, str(resolved)) == resolved


@settings(max_examples=100, deadline=None)
@given(raw=st.text(max_size=40))
def test_arbitrary_text_never_escapes_or_crashes(sandbox: Path, raw: str) -> None:
    root = sandbox.resolve()
    try:
        resolved = resolve_in_workspace(sandbox, raw)
    except ToolError:
        return
    assert resolved == root or root in resolved.parents
