"""`execute_code`: a script calling the session's tools through `hermes_tools`, the errors it
gets back, what it is offered, approvals (its tool calls' and its own), the call cap and calls
from threads. Containment is in test_execute_code_limits.py."""

from __future__ import annotations

from tools import ToolContext
from tools.host import ToolHost

from .code_kit import run, tools
from .conftest import Approver, with_host


def test_a_script_calls_three_tools_and_prints_a_summary(ctx: ToolContext) -> None:
    for name, body in [("a.txt", "apple\nbanana\n"), ("b.txt", "cherry\napple pie\n")]:
        (ctx.workspace / name).write_text(body)
    content, ok = run(
        ctx,
        """
        from hermes_tools import read_file, search_files, write_file
        hits = search_files("apple")
        first = read_file("a.txt", max_lines=1)
        write_file("summary.txt", content=f"{hits.count('apple')} apples")
        print("hits:", hits.count("apple"), "| first:", first.split("|", 1)[1].strip())
        """,
    )
    assert ok, content
    lines = content.splitlines()
    assert lines[0] == "hits: 2 | first: apple"
    assert lines[-1].startswith("[exit code 0, ")
    assert "read_file x1" in lines[-1] and "write_file x1" in lines[-1]
    assert "search_files x1" in lines[-1]
    assert (ctx.workspace / "summary.txt").read_text() == "2 apples"
    assert "banana" not in content  # what the tools returned stays in the script


def test_bad_arguments_get_a_clear_error_the_script_can_catch(ctx: ToolContext) -> None:
    content, ok = run(
        ctx,
        """
        import hermes_tools
        try:
            hermes_tools.read_file(pth="x.txt")
        except hermes_tools.ToolError as exc:
            print("caught:", exc)
        hermes_tools.write_file("x.txt")
        """,
    )
    assert not ok
    assert "caught: invalid arguments for read_file: path: Field required" in content
    assert "pth: Extra inputs are not permitted" in content
    assert content.startswith("Error: the script failed with exit code 1")
    # the traceback names the script's line, not the module's plumbing
    assert 'File "<script>", line 7' in content and "hermes_tools.py" not in content
    assert (
        "hermes_tools.ToolError: invalid arguments for write_file: content: Field required"
        in content
    )


def test_only_enabled_tools_are_offered_and_described(ctx: ToolContext) -> None:
    registry = tools(["read_file", "delegate_task"])
    description = registry.get("execute_code").description  # type: ignore[union-attr]
    assert "read_file(path, start_line=..., max_lines=...)" in description
    assert "write_file" not in description and "delegate_task" not in description
    content, ok = run(ctx, "from hermes_tools import write_file\n", registry)
    assert not ok and "ImportError: cannot import name 'write_file'" in content
    nothing = tools([]).get("execute_code")
    assert "No tools can be called from scripts" in nothing.description  # type: ignore[union-attr]


def test_a_dangerous_terminal_call_asks_and_a_denial_refuses(ctx: ToolContext) -> None:
    approver = Approver(answer=False)
    hosted = with_host(ctx, ToolHost(ask_approval=approver))
    (hosted.workspace / "build").mkdir()
    content, ok = run(
        hosted,
        """
        from hermes_tools import ToolError, terminal
        print(terminal("echo harmless").splitlines()[0])
        try:
            terminal("rm -rf build")
        except ToolError as exc:
            print("refused:", exc)
        """,
        tools(["terminal"], approval="dangerous"),
    )
    assert ok, content
    assert content.splitlines()[:2] == [
        "harmless",
        "refused: the user did not approve this command (denied or no answer in time)",
    ]
    [request] = approver.requests
    assert (request.tool, request.action) == ("terminal", "rm -rf build")
    assert (hosted.workspace / "build").is_dir()


def test_a_script_running_programs_itself_is_screened_like_a_command(ctx: ToolContext) -> None:
    approver = Approver(answer=False)
    hosted = with_host(ctx, ToolHost(ask_approval=approver))
    script = "import subprocess\nsubprocess.run(['touch', 'ran'])\n"
    content, ok = run(hosted, script, tools(approval="dangerous"))
    assert not ok and "did not approve this script" in content
    [request] = approver.requests
    assert request.tool == "execute_code" and "starts other programs" in request.reason
    assert not (hosted.workspace / "ran").exists()
    # its own tool calls are left to their tools: a plain read asks nothing
    approver.requests.clear()
    (hosted.workspace / "a.txt").write_text("hi")
    content, ok = run(
        hosted, "from hermes_tools import read_file, write_file\nread_file('a.txt')\n"
    )
    assert ok and approver.requests == []


def test_the_call_cap(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("a")
    content, ok = run(
        ctx,
        """
        from hermes_tools import ToolError, read_file
        for _ in range(4):
            try:
                read_file("a.txt")
                print("ok")
            except ToolError as exc:
                print(exc)
        """,
        tools(max_calls=2),
    )
    assert ok
    assert (
        content.splitlines()[:4] == ["ok", "ok"] + ["this script reached its limit of 2 calls"] * 2
    )
    assert "read_file x2, 2 refused over the limit" in content


def test_calls_from_threads_are_answered_concurrently(ctx: ToolContext) -> None:
    for i in range(8):
        (ctx.workspace / f"f{i}.txt").write_text(f"file {i}")
    content, ok = run(
        ctx,
        """
        from concurrent.futures import ThreadPoolExecutor
        from hermes_tools import read_file
        with ThreadPoolExecutor(8) as pool:
            texts = list(pool.map(read_file, [f"f{i}.txt" for i in range(8)]))
        print(sum(f"file {i}" in t for i, t in enumerate(texts)))
        """,
    )
    assert ok and content.startswith("8\n")


def test_workspace_modules_import_but_cannot_shadow_the_standard_library(
    ctx: ToolContext,
) -> None:
    (ctx.workspace / "socket.py").write_text("raise SystemExit('shadowed')\n")
    (ctx.workspace / "helper.py").write_text("ANSWER = 42\n")
    (ctx.workspace / "a.txt").write_text("a")
    script = "import helper\nfrom hermes_tools import read_file\nread_file('a.txt')\n"
    script += "print(helper.ANSWER)\n"
    content, ok = run(ctx, script)
    assert ok and content.startswith("42\n"), content


def test_a_sub_agents_scripts_get_only_its_tools(ctx: ToolContext) -> None:
    narrowed = tools().subset(["read_file", "execute_code"])
    description = narrowed.get("execute_code").description  # type: ignore[union-attr]
    assert "read_file(" in description and "write_file" not in description
    content, ok = run(ctx, "from hermes_tools import write_file\n", narrowed)
    assert not ok and "cannot import name 'write_file'" in content
