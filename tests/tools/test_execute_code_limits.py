"""`execute_code` contained: the workspace, the SSRF guard, the environment, processes,
memory, output, a script deaf to SIGTERM, a stop, kernel limits, a link where the spill file
goes, garbage on the socket; in both sandbox modes where it matters."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import ToolContext, sandbox_procs

from ..fakes.web import FakeWeb
from .code_kit import gone_from, run, tools, wait_gone
from .code_kit import mode as mode
from .test_terminal import _running


@pytest.fixture(scope="module")
def web() -> Iterator[FakeWeb]:
    with FakeWeb() as fake:
        yield fake  # type: ignore[misc]


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
    # what earlier tests in this worker left running (a sentinel, a server) is not the bomb's
    before = sandbox_procs.descendants(os.getpid())
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

    def left() -> dict[int, str]:
        """What the bomb left running: new descendants that are alive, each with its state
        and command line (a zombie is dead; `tests/tools/test_sandbox_reap.py` covers its
        reaping)."""
        after = sandbox_procs.descendants(os.getpid())
        alive = {}
        for pid, at in after.items():
            st = sandbox_procs._stat(pid)
            if before.get(pid) != at and st is not None and st[1] != "Z":
                alive[pid] = f"{st[1]} {_cmdline(pid)}"
        return alive

    # killed, each still takes a moment to go on a loaded machine
    deadline = time.monotonic() + 15
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == {}
    assert gone_from(ctx.workspace)  # in fallback mode orphans are not our descendants


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


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
    assert wait_gone("sleep 60.021")


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
    assert wait_gone("sleep 60.023")


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


def test_the_spill_file_never_follows_a_link_out_of_the_workspace(ctx: ToolContext) -> None:
    outside = ctx.workspace.parent / "elsewhere"
    outside.mkdir()
    os.symlink(outside, ctx.workspace / ".execute_code")
    content, ok = run(ctx, "print('y' * 5000)\n", tools(max_stdout_chars=100))
    assert ok and "the rest could not be saved" in content
    assert list(outside.iterdir()) == []


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
