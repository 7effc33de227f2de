"""File tools against hostile workspaces: a FIFO, socket or device is refused at once (never a
worker blocked for good), a symlink loop does not break `search_files`, and `write_file` and
`patch` refuse oversized content with an error the model can read."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai import FakeOpenAI
from tests.hostile.tool_kit import gateway, reply_text, tool_responder
from tools import ToolContext, ToolRegistry
from tools.catalog import ToolSettings, build_registry
from tools.errors import ToolError
from tools.paths import read_regular
from tools.search_files import SearchFilesTool


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    """``<tmp>/home/workspace`` with a text file and a FIFO nobody writes to."""
    ws = tmp_path / "home" / "workspace"
    ws.mkdir(parents=True)
    (ws / "notes.txt").write_text("x marks the spot\n")
    os.mkfifo(ws / "stuck.fifo")
    yield ws
    for _ in range(4):  # free any thread still blocked opening it (only without the fix)
        try:
            os.close(os.open(ws / "stuck.fifo", os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            break


def call(registry: ToolRegistry, ws: Path, name: str, timeout: float = 10, **args: object) -> str:
    """The observation, or a failure when the call is still blocked after ``timeout``."""
    out: list[str] = []
    ctx = ToolContext(workspace=ws)
    worker = threading.Thread(
        target=lambda: out.append(registry.dispatch(name, json.dumps(args), ctx).content),
        daemon=True,
    )
    worker.start()
    worker.join(timeout)
    assert out, f"{name} {args} still blocked after {timeout} s"
    return out[0]


@pytest.fixture
def tools() -> ToolRegistry:
    settings = ToolSettings(max_write_bytes=1024 * 1024)
    registry = build_registry(["read_file", "write_file", "patch"], settings)
    registry.register(SearchFilesTool(None))  # the Python walk: it opens the files itself
    return registry


@pytest.mark.e2e
def test_fifo_calls_do_not_starve_other_users(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    ws = tmp_path / "home" / "workspace"
    ws.mkdir(parents=True)
    (ws / "notes.txt").write_text("x marks the spot\n")
    os.mkfifo(ws / "stuck.fifo")
    fake_llm.responder = tool_responder(
        {
            "read": ("read_file", {"path": "stuck.fifo"}),
            "search": ("search_files", {"pattern": "x marks"}),
        }
    )
    (tmp_path / "bin").mkdir()  # no ripgrep: the Python walk opens every file it meets
    gw = gateway(tmp_path / "home", fake_llm, str(tmp_path / "bin"), runner={"workers": 2})
    replies: dict[str, str] = {}

    def ask(user: str, message: str) -> None:
        replies[user] = reply_text(gw, message, user, timeout=15)

    try:
        gw.start()
        users = [("alice", "read the pipe"), ("bob", "search for it")]
        threads = [threading.Thread(target=ask, args=u, daemon=True) for u in users]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15)
        carol = reply_text(gw, "hello", "carol", timeout=15)
    finally:
        gw.kill()
        for _ in range(2):
            try:
                os.close(os.open(ws / "stuck.fifo", os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                break
    assert replies.get("alice") == (
        "observed: Error: 'stuck.fifo' is a FIFO (named pipe), not a regular file; file tools "
        "refuse it"
    )
    assert replies.get("bob") == "observed: notes.txt:1: x marks the spot"
    assert carol == "echo: hello"


def test_file_tools_refuse_a_fifo_and_a_socket_at_once(
    tools: ToolRegistry, workspace: Path
) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(workspace / "app.sock"))
    try:
        for name in ("stuck.fifo", "app.sock"):
            kind = "a FIFO (named pipe)" if name.endswith("fifo") else "a socket"
            refused = f"Error: '{name}' is {kind}, not a regular file; file tools refuse it"
            assert call(tools, workspace, "read_file", path=name) == refused
            assert call(tools, workspace, "write_file", path=name, content="x") == refused
            appended = call(tools, workspace, "write_file", path=name, content="x", mode="append")
            assert appended == refused
            edits = [{"old": "a", "new": "b"}]
            assert call(tools, workspace, "patch", path=name, edits=edits) == refused
            assert Path(workspace / name).exists() and not (workspace / name).is_file()
    finally:
        sock.close()
    found = call(tools, workspace, "search_files", pattern="marks")
    assert found == "notes.txt:1: x marks the spot"  # the walk skipped the FIFO and socket
    assert call(tools, workspace, "search_files", glob="*") == "notes.txt"


def test_a_symlink_loop_does_not_break_search(tools: ToolRegistry, workspace: Path) -> None:
    (workspace / "loop").symlink_to(workspace / "loop")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "a").symlink_to(workspace / "sub" / "b")
    (workspace / "sub" / "b").symlink_to(workspace / "sub" / "a")
    (workspace / "sub" / "up").symlink_to(workspace)  # a directory cycle, not followed
    (workspace / "sub" / "code.py").write_text("marks = 1\n")
    found = call(tools, workspace, "search_files", pattern="marks")
    assert found.splitlines() == ["notes.txt:1: x marks the spot", "sub/code.py:1: marks = 1"]
    assert call(tools, workspace, "search_files", glob="*.py") == "sub/code.py"


def test_oversized_writes_and_patches_are_refused(tools: ToolRegistry, workspace: Path) -> None:
    big = "y" * (20 * 1024 * 1024)
    refused = call(tools, workspace, "write_file", path="big.txt", content=big)
    assert refused == (
        f"Error: content is {len(big)} bytes; write_file writes at most 1048576 bytes in one call"
    )
    assert not (workspace / "big.txt").exists()
    edits = [{"old": "x marks", "new": big}]
    refused = call(tools, workspace, "patch", path="notes.txt", edits=edits)
    assert refused.startswith("Error: the edits are ") and "at most 1048576" in refused
    diff = "@@ -1 +1 @@\n-x marks the spot\n+" + big + "\n"
    assert "at most 1048576" in call(tools, workspace, "patch", path="notes.txt", diff=diff)
    # a small edit applied everywhere can still multiply a file: the result is capped too
    (workspace / "many.txt").write_text("a" * 1_000_000)
    edits_all: list[dict[str, object]] = [{"old": "a", "new": "b" * 100, "replace_all": True}]
    grown = call(tools, workspace, "patch", path="many.txt", edits=edits_all)
    assert grown == "Error: edit 1 would make the file larger than 4194304 bytes"
    assert (workspace / "notes.txt").read_text() == "x marks the spot\n"
    assert (workspace / "many.txt").stat().st_size == 1_000_000
    ok = call(tools, workspace, "write_file", path="fine.txt", content="z" * 1024 * 1024)
    assert ok == "Created fine.txt (1048576 bytes, 1 lines)."


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_without_reading(device: str) -> None:
    # a workspace cannot hold a device node without root (and links out are refused before
    # this point), so the opener is asked directly: /dev/zero would otherwise read forever
    with pytest.raises(ToolError, match=r"'dev' is a device, not a regular file"):
        read_regular(Path(device), 1 << 30, "dev")
