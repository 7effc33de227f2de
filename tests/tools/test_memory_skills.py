"""`memory`, the skills tools, `session_search` and `delegate_task` at the tool level."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tools import ToolContext, ToolRegistry
from tools.catalog import ToolSettings, build_registry
from tools.host import DelegateRequest, SearchHit, ToolHost
from tools.memory import memory_block

from .conftest import call, with_host


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def reg(home: Path) -> ToolRegistry:
    names = ["memory", "skills_list", "skill_view", "skill_manage", "session_search"]
    return build_registry([*names, "delegate_task"], ToolSettings(home=home, memory_max_chars=1000))


class TestMemory:
    def test_add_view_replace_remove(self, reg: ToolRegistry, ctx: ToolContext, home: Path) -> None:
        assert call(reg, ctx, "memory", action="view") == ("(memory is empty)", True)
        assert call(reg, ctx, "memory", action="add", content="User is Ada; prefers metric.")[1]
        assert call(reg, ctx, "memory", action="add", content="Server: db1 (Postgres 16)\n§\nx")[1]
        assert call(reg, ctx, "memory", action="add", content="User is Ada; prefers metric.") == (
            "Already remembered.",
            True,
        )
        content, _ = call(reg, ctx, "memory", action="view")
        assert content.splitlines()[0] == "[1] User is Ada; prefers metric."
        assert content.splitlines()[-1].startswith("[2 entries, ")
        assert call(reg, ctx, "memory", action="replace", old_text="db1", content="Server: db2")[1]
        assert call(reg, ctx, "memory", action="remove", old_text="Ada")[1]
        assert (home / "MEMORY.md").read_text() == "Server: db2\n"
        assert memory_block(home) == (
            "Your memory (MEMORY.md, from earlier conversations; update it with the memory "
            "tool):\n- Server: db2"
        )

    def test_a_separator_inside_an_entry_does_not_split_it(
        self, reg: ToolRegistry, ctx: ToolContext
    ) -> None:
        call(reg, ctx, "memory", action="add", content="a\n§\nb")
        content, _ = call(reg, ctx, "memory", action="view")
        assert content.startswith("[1] a\n§ \nb\n[1 entries")

    @pytest.mark.parametrize(
        ("args", "needle"),
        [
            ({"action": "add"}, "'add' needs 'content'"),
            ({"action": "remove"}, "'old_text' is required"),
            ({"action": "remove", "old_text": "zzz"}, "no entry contains 'zzz'"),
            ({"action": "forget"}, "action: Input should be 'view', 'add', 'replace' or 'remove'"),
            ({"action": "add", "content": "y" * 2000}, "the cap is 1000"),
        ],
    )
    def test_bad_inputs(
        self, reg: ToolRegistry, ctx: ToolContext, args: dict[str, object], needle: str
    ) -> None:
        content, ok = call(reg, ctx, "memory", **args)
        assert not ok and needle in content

    def test_ambiguous_old_text(self, reg: ToolRegistry, ctx: ToolContext) -> None:
        call(reg, ctx, "memory", action="add", content="likes tea")
        call(reg, ctx, "memory", action="add", content="likes trains")
        content, ok = call(reg, ctx, "memory", action="remove", old_text="likes")
        assert not ok and "2 entries contain 'likes'" in content

    def test_concurrent_adds_lose_nothing(self, reg: ToolRegistry, ctx: ToolContext) -> None:
        threads = [
            threading.Thread(
                target=call,
                args=(reg, ctx, "memory"),
                kwargs={"action": "add", "content": f"fact {i}"},
            )
            for i in range(12)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        content, _ = call(reg, ctx, "memory", action="view")
        facts = {line.split("] ", 1)[1] for line in content.splitlines()[:-1]}
        assert facts == {f"fact {i}" for i in range(12)}

    def test_notes_leave_no_lock_file_and_a_view_creates_nothing(
        self, home: Path, ctx: ToolContext
    ) -> None:
        reg = build_registry(["memory"], ToolSettings(home=home, memory_scope="user"))
        ctx = with_host(ctx, ToolHost(user_of=lambda key: "telegram/42"))
        assert call(reg, ctx, "memory", action="view") == ("(memory is empty)", True)
        assert not home.exists()  # a user who only looked leaves nothing behind
        assert call(reg, ctx, "memory", action="add", content="likes tea")[1]
        assert call(reg, ctx, "memory", action="replace", old_text="tea", content="likes rum")[1]
        assert call(reg, ctx, "memory", action="view")[0].startswith("[1] likes rum")
        notes = home / "memory" / "telegram"
        assert sorted(p.name for p in notes.iterdir()) == ["42.md"]
        (notes / "42.md.lock").touch()  # left by an older version: gone after the next write
        assert call(reg, ctx, "memory", action="remove", old_text="rum")[1]
        assert sorted(p.name for p in notes.iterdir()) == ["42.md"]
        assert sorted(p.name for p in home.iterdir()) == ["memory"]


class TestSkills:
    def test_create_list_view_update_delete(
        self, reg: ToolRegistry, ctx: ToolContext, home: Path
    ) -> None:
        assert call(reg, ctx, "skills_list") == (
            "(no skills yet; save one with skill_manage)",
            True,
        )
        text = "---\ndescription: Deploy the site\n---\n1. build\n2. rsync"
        assert call(reg, ctx, "skill_manage", action="create", name="deploy", content=text)[1]
        (home / "skills" / "backup").mkdir()
        (home / "skills" / "backup" / "SKILL.md").write_text("# Nightly backup\n\nrun it")
        assert call(reg, ctx, "skills_list") == (
            "- backup: Nightly backup\n- deploy: Deploy the site",
            True,
        )
        assert call(reg, ctx, "skill_view", name=" deploy ")[0] == text + "\n"
        assert call(reg, ctx, "skill_manage", action="update", name="deploy", content="v2")[1]
        assert call(reg, ctx, "skill_view", name="deploy")[0] == "v2\n"
        assert call(reg, ctx, "skill_manage", action="delete", name="deploy")[1]
        assert call(reg, ctx, "skills_list")[0] == "- backup: Nightly backup"

    @pytest.mark.parametrize(
        ("tool", "args", "needle"),
        [
            ("skill_view", {"name": "nope"}, "no skill named 'nope' (skills: none)"),
            ("skill_view", {"name": "../etc/passwd"}, "invalid skill name"),
            ("skill_manage", {"action": "create", "name": "Bad Name", "content": "x"}, "invalid"),
            ("skill_manage", {"action": "create", "name": "a"}, "needs the skill's 'content'"),
            (
                "skill_manage",
                {"action": "update", "name": "a", "content": "x"},
                "use action 'create'",
            ),
            ("skill_manage", {"action": "delete", "name": "a"}, "no skill named 'a'"),
            ("skills_list", {"extra": 1}, "extra: Extra inputs are not permitted"),
        ],
    )
    def test_bad_inputs(
        self, reg: ToolRegistry, ctx: ToolContext, tool: str, args: dict[str, object], needle: str
    ) -> None:
        content, ok = call(reg, ctx, tool, **args)
        assert not ok and needle in content


def test_session_search_formats_hits_and_needs_the_host(
    reg: ToolRegistry, ctx: ToolContext
) -> None:
    content, ok = call(reg, ctx, "session_search", query="tides")
    assert not ok and "cannot be searched here" in content
    seen: list[tuple[str, str, int]] = []

    def search(key: str, query: str, limit: int) -> list[SearchHit]:
        seen.append((key, query, limit))
        return [SearchHit(0.0, "user", "the [tides] at Brest", current=False)]

    hosted = with_host(ctx, ToolHost(search_history=search))
    assert call(reg, hosted, "session_search", query=" tides ", limit=3) == (
        "[1970-01-01 00:00 UTC, earlier conversation] user: the [tides] at Brest",
        True,
    )
    assert seen == [("test:dm:1", "tides", 3)]


def test_delegate_needs_the_agent_and_passes_the_request(
    reg: ToolRegistry, ctx: ToolContext
) -> None:
    content, ok = call(reg, ctx, "delegate_task", task="x")
    assert not ok and "delegation is not available at this depth (0)" in content
    got: list[DelegateRequest] = []
    delegating = ToolContext(workspace=ctx.workspace, delegate=lambda r: got.append(r) or "done")
    assert call(reg, delegating, "delegate_task", task=" sum ", context=" c ", tools=[" a "]) == (
        "done",
        True,
    )
    assert got == [DelegateRequest("sum", "c", ("a",))]
