"""A backtracking regex from the model cannot freeze the gateway: `search_files` runs the
pattern in a child process, killed at `tools.search_timeout_s` or on `/stop`, while `/healthz`
and other users are answered throughout. Both engines: the Python fallback (no ripgrep on
PATH) and ripgrep, with a pattern it refuses (a look-ahead), which falls back to Python."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.hostile.tool_kit import WORKER, Prober, children, gateway, reply_text, tool_responder

pytestmark = pytest.mark.e2e

BOMB = "a" * 40 + "!"  # (a+)+$ on this takes ~2**40 steps in a backtracking engine
PATTERNS = {"python": "(a+)+$", "ripgrep": "(a+)+$(?=x)"}  # rg refuses look-around


def search_path(engine: str, tmp_path: Path) -> str:
    """A PATH with no ripgrep (the gateway then searches with Python), or with it."""
    if engine == "python":
        empty = tmp_path / "bin"
        empty.mkdir()
        return str(empty)
    rg = shutil.which("rg")
    if rg is None:
        pytest.skip("ripgrep is not installed")
    return os.path.dirname(rg)


def bomb_gateway(tmp_path: Path, llm: FakeOpenAI, engine: str, timeout_s: float) -> GatewayProcess:
    workspace = tmp_path / "home" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "bomb.txt").write_text(BOMB + "\n")
    llm.responder = tool_responder({"bomb": ("search_files", {"pattern": PATTERNS[engine]})})
    path = search_path(engine, tmp_path)
    return gateway(tmp_path / "home", llm, path, tools={"search_timeout_s": timeout_s})


def chat_in_background(
    gw: GatewayProcess, message: str, user: str, out: dict[str, object]
) -> threading.Thread:
    def run() -> None:
        started = time.monotonic()
        try:
            out["text"] = reply_text(gw, message, user, timeout=60)
        except Exception as exc:  # reported by the assertions on `out`
            out["error"] = repr(exc)
        out["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("engine", ["python", "ripgrep"])
def test_a_regex_bomb_is_stopped_at_its_limit_while_all_else_is_answered(
    tmp_path: Path, fake_llm: FakeOpenAI, engine: str
) -> None:
    gw = bomb_gateway(tmp_path, fake_llm, engine, timeout_s=3)
    alice: dict[str, object] = {}
    try:
        gw.start()
        with Prober(gw).running() as probe:
            searching = chat_in_background(gw, "bomb the search", "alice", alice)
            wait_until(lambda: len(fake_llm.requests) >= 1, timeout=10)
            time.sleep(0.5)  # the pattern is running now
            started = time.monotonic()
            bob = reply_text(gw, "hello", "bob", timeout=10)
            bob_seconds = time.monotonic() - started
            searching.join(30)
            time.sleep(0.5)
        left = children(gw.proc.pid, WORKER) if gw.proc else []
    finally:
        gw.kill()
    assert bob == "echo: hello" and bob_seconds < 5
    assert str(alice.get("text", alice)).startswith(
        "observed: Error: the search took longer than 3 s and was stopped; simplify the pattern"
    )
    assert 3 <= float(alice["seconds"]) < 20  # type: ignore[arg-type]
    assert probe.slow == [], f"/healthz missed or slow: {probe.slow}"
    assert len(probe.answers) >= 5
    assert left == []  # the child was killed, not left running


@pytest.mark.parametrize("engine", ["python", "ripgrep"])
def test_stop_kills_a_running_search_at_once(
    tmp_path: Path, fake_llm: FakeOpenAI, engine: str
) -> None:
    gw = bomb_gateway(tmp_path, fake_llm, engine, timeout_s=120)
    alice: dict[str, object] = {}
    try:
        gw.start()
        assert gw.proc is not None
        pid = gw.proc.pid
        searching = chat_in_background(gw, "bomb the search", "alice", alice)
        running = wait_until(lambda: children(pid, WORKER), timeout=15, interval=0.1)
        started = time.monotonic()
        stopped = reply_text(gw, "/stop", "alice", timeout=10)
        wait_until(lambda: not children(pid, WORKER), timeout=10, interval=0.1)
        killed_after = time.monotonic() - started
        searching.join(10)
        after = reply_text(gw, "still there?", "alice", timeout=10)
    finally:
        gw.kill()
    assert running  # the pattern runs in a child process
    assert stopped == "Stopped."
    assert killed_after < 5  # not the 120 s limit
    assert "seconds" in alice and float(alice["seconds"]) < 15  # type: ignore[arg-type]
    assert after == "echo: still there?"
