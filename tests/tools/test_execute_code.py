"""`execute_code`: a script calling the session's tools through `hermes_tools`, the errors it
gets back, and each containment: the workspace, the SSRF guard, processes, memory, output, a
script deaf to SIGTERM, a stop, approvals, the call cap."""

from __future__ import annotations

import os
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools import ToolContext, ToolRegistry, sandbox, sandbox_procs
from tools.catalog import CodeSettings, TerminalSettings, ToolSettings, WebSettings, build_registry
from tools.host import ToolHost

from ..fakes.web import FakeWeb
from .conftest import Approver, call, with_host
from .test_terminal import _running

FILES = ["read_file", "write_file", "search_files", "patch"]


@pytest.fixture(scope="module")
def web() -> Iterator[FakeWeb]:
    with FakeWeb() as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture(params=["namespace", "fallback"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both sandbox modes: a user namespace where the machine allows it, else the fallback."""
    if request.param == "namespace" and sandbox.current_mode() != "namespace":
        pytest.skip("user namespaces are not available here")
    sandbox.force_mode(request.param)
    yield request.param
    sandbox.force_mode(None)


def tools(
    names: list[str] | None = None, approval: str = "off", web: str = "", **code: Any
) -> ToolRegistry:
    settings = ToolSettings(
        terminal=TerminalSettings(approval=approval, env={"PATH": os.defpath}),  # type: ignore[arg-type]
        web=WebSettings(search_url=web),
        code=CodeSettings(**code),
    )
    return build_registry([*(FILES if names is None else names), "execute_code"], settings)


def run(ctx: ToolContext, script: str, registry: ToolRegistry | None = None) -> tuple[str, bool]:
    return call(registry or tools(), ctx, "execute_code", code=textwrap.dedent(script))


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


def test_reading_outside_the_workspace_is_refused(ctx: ToolContext) -> None:
    (ctx.workspace.parent / "secret.txt").write_text("hunter2")
    os.symlink(ctx.workspace.parent, ctx.workspace / "link")
    content, ok = run(
        ctx,
        """
        from hermes_tools import ToolError, read_file
        for path in ["../secret.txt", "/etc/hostname", "link/secret.txt"]:
            try:
                print(read_file(path))
            except ToolError as exc:
                print("refused:", exc)
        """,
    )
    assert ok, content
    assert content.count("refused:") == 3 and "outside the workspace" in content
    assert "hunter2" not in content


def test_web_extract_to_a_private_address_is_refused(ctx: ToolContext, web: FakeWeb) -> None:
    before = list(web.hits)
    content, ok = run(
        ctx,
        f"""
        from hermes_tools import web_extract
        web_extract("{web.url}/article")
        """,
        tools(["web_extract"]),
    )
    assert not ok
    assert "refused: 127.0.0.1 resolves to a private, loopback" in content
    assert web.hits == before  # never connected


def test_the_environment_is_the_allow_list(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-gateway-secret")
    content, ok = run(ctx, "import os\nprint(sorted(os.environ))\nprint(os.getcwd())\n")
    assert ok and "OPENAI_API_KEY" not in content and "sk-gateway" not in content
    assert str(ctx.workspace.resolve()) in content.splitlines()[1]


def test_a_fork_bomb_is_contained(ctx: ToolContext, mode: str) -> None:
    started = time.monotonic()
    content, ok = run(
        ctx,
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
        tools(timeout_s=60, max_processes=16),
    )
    assert not ok
    assert time.monotonic() - started < 30
    assert "started more than 16 processes" in content or "timed out" in content
    assert sandbox_procs.descendants(os.getpid()) == {}
    assert _wait_gone("hermes_tools._main")  # in fallback mode orphans are not our descendants


def test_unbounded_allocation_fails_in_the_script(ctx: ToolContext) -> None:
    content, ok = run(
        ctx,
        """
        hoard = []
        while True:
            hoard.append(bytearray(8 * 1024 * 1024))
        """,
        tools(memory_mb=256),
    )
    assert not ok and "MemoryError" in content


def test_unbounded_print_is_cut_spilled_and_killed(ctx: ToolContext) -> None:
    cap = 1024 * 1024
    content, ok = run(
        ctx,
        "while True:\n    print('x' * 999)\n",
        tools(max_stdout_chars=2000, spill_max_bytes=cap),
    )
    assert not ok
    assert f"printed more than {cap} bytes; the script was killed" in content
    assert len(content) < 5000
    [spill] = (ctx.workspace / ".execute_code").iterdir()
    assert spill.stat().st_size == cap
    assert f"its first {cap} bytes are in .execute_code/{spill.name}" in content


def test_long_output_is_returned_in_part_and_saved_whole(ctx: ToolContext) -> None:
    content, ok = run(ctx, "for i in range(20000):\n    print(i)\n", tools(max_stdout_chars=1000))
    assert ok
    assert content.startswith("0\n1\n2\n")
    [spill] = (ctx.workspace / ".execute_code").iterdir()
    assert spill.read_text() == "".join(f"{i}\n" for i in range(20000))
    assert f"all of it is in .execute_code/{spill.name}" in content
    assert len(content) < 1500


def test_a_script_ignoring_sigterm_is_killed_at_its_timeout(ctx: ToolContext, mode: str) -> None:
    started = time.monotonic()
    content, ok = run(
        ctx,
        """
        import os, signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.kill(os.getpid(), signal.SIGTERM)
        subprocess.Popen(["sleep", "60.021"], start_new_session=True)
        print("still here", flush=True)
        time.sleep(600)
        """,
        tools(timeout_s=1.5),
    )
    assert time.monotonic() - started < 15
    assert not ok and content.startswith("Error: timed out after 1.5 s; the script was killed")
    assert "stdout:\nstill here" in content
    assert _wait_gone("sleep 60.021")


def test_a_stop_kills_the_script_and_what_it_started(workspace: Path, mode: str) -> None:
    stop = threading.Event()
    ctx = ToolContext(workspace=workspace, should_stop=stop.is_set)
    result: list[tuple[str, bool]] = []
    script = "import subprocess\nsubprocess.run(['sleep', '60.023'])\n"
    worker = threading.Thread(target=lambda: result.append(run(ctx, script)))
    worker.start()
    deadline = time.monotonic() + 10
    while not _running("sleep 60.023") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _running("sleep 60.023")
    stop.set()
    worker.join(10)
    assert not worker.is_alive()
    content, ok = result[0]
    assert not ok and content.startswith("Error: interrupted by the user; the script was killed")
    assert _wait_gone("sleep 60.023")


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


def _wait_gone(marker: str, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _running(marker) == []


def test_the_kernel_limits_are_set(ctx: ToolContext) -> None:
    content, ok = run(
        ctx,
        """
        import resource as r
        for name in ["RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE", "RLIMIT_NPROC"]:
            print(name, r.getrlimit(getattr(r, name))[0])
        """,
        tools(timeout_s=20, memory_mb=300, open_files=64, max_processes=12),
    )
    assert ok, content
    assert content.splitlines()[:4] == [
        f"RLIMIT_AS {300 * 1024 * 1024}",
        "RLIMIT_CPU 25",
        "RLIMIT_NOFILE 64",
        "RLIMIT_NPROC 12",
    ]


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


def test_garbage_on_the_socket_ends_the_channel_not_the_gateway(ctx: ToolContext) -> None:
    (ctx.workspace / "a.txt").write_text("a")
    content, ok = run(
        ctx,
        """
        import os, stat
        from hermes_tools import ToolError, read_file
        read_file("a.txt")
        [fd] = [
            fd for fd in range(3, 64)
            if os.path.exists(f"/proc/self/fd/{fd}") and stat.S_ISSOCK(os.fstat(fd).st_mode)
        ]
        os.write(fd, b"\\xff\\xff\\xff\\xff not a frame")
        try:
            read_file("a.txt")
        except ToolError as exc:
            print("after garbage:", exc)
        """,
    )
    assert ok, content
    assert "after garbage: read_file: the gateway closed the connection" in content
    assert "read_file x1" in content


def test_a_sub_agents_scripts_get_only_its_tools(ctx: ToolContext) -> None:
    narrowed = tools().subset(["read_file", "execute_code"])
    description = narrowed.get("execute_code").description  # type: ignore[union-attr]
    assert "read_file(" in description and "write_file" not in description
    content, ok = run(ctx, "from hermes_tools import write_file\n", narrowed)
    assert not ok and "cannot import name 'write_file'" in content


def test_the_spill_file_never_follows_a_link_out_of_the_workspace(ctx: ToolContext) -> None:
    outside = ctx.workspace.parent / "elsewhere"
    outside.mkdir()
    os.symlink(outside, ctx.workspace / ".execute_code")
    content, ok = run(ctx, "print('y' * 5000)\n", tools(max_stdout_chars=100))
    assert ok and "the rest could not be saved" in content
    assert list(outside.iterdir()) == []
