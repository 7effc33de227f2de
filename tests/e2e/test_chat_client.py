"""`hermes chat` driven in a real terminal (pexpect) against a running daemon."""

from __future__ import annotations

import io
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def gateway(tmp_path: Path, fake_llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        tmp_path / "home", {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake"}}
    )
    yield gw.start()
    gw.kill()


def _as_from_a_shell() -> None:
    # a shell starts a command with Ctrl-C's default action and no signal blocked; the test
    # process may have inherited or left other dispositions (which a child keeps across exec)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def spawn_chat(gw: GatewayProcess) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "hermes_gateway", "chat", "--config", str(gw.config_path), "--session", "tty"],
        encoding="utf-8",
        timeout=20,
        env={"HOME": str(gw.home.parent), "PATH": "/usr/bin:/bin", "TERM": "dumb"},
        preexec_fn=_as_from_a_shell,
    )
    child.expect("Connected to")
    return child


def test_streams_replies_and_runs_commands(gateway: GatewayProcess, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(text("Hello from the model, streamed in pieces.", chunk_size=5))
    child = spawn_chat(gateway)
    child.expect("you> ")
    child.sendline("hi there")
    child.expect("Hello from the model, streamed in pieces.")
    child.expect("you> ")
    child.sendline("/status")
    child.expect("Session: api:dm:tty")
    child.expect("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)


def test_ctrl_c_during_a_reply_stops_the_run(gateway: GatewayProcess, fake_llm: FakeOpenAI) -> None:
    # 20 s of stream: on a loaded machine Ctrl-C must still land mid-reply (it is sent as soon
    # as the first words show, so the test itself stays short)
    fake_llm.push(text("slow " * 400, chunk_size=5, chunk_delay=0.05))
    child = spawn_chat(gateway)
    child.expect("you> ")
    child.sendline("write a lot")
    child.expect("slow slow")
    child.sendintr()
    child.expect(r"\[stopping\]")
    child.expect("Stopped.")
    child.expect("you> ")
    child.sendline("still there?")
    child.expect("echo: still there\\?")
    child.sendeof()


def test_tool_activity_is_shown(gateway: GatewayProcess, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(tool_calls(("read_file", {"path": "notes.txt"})), text("No notes yet."))
    child = spawn_chat(gateway)
    child.expect("you> ")
    child.sendline("read my notes")
    child.expect(r"\[tool: read_file\]")
    child.expect("No notes yet.")
    child.expect("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)


def test_a_failed_tool_call_shows_as_failed_without_a_stray_prompt(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(tool_calls(("read_file", {"path": "missing.txt"})), text("No notes yet."))
    child = spawn_chat(gateway)
    child.expect("you> ")
    child.logfile_read = io.StringIO()
    child.sendline("read my notes")
    child.expect(r"\[tool: read_file failed\]")
    child.expect("No notes yet.")
    child.expect("you> ")
    shown = child.logfile_read.getvalue().replace("\x1b[2m", "").replace("\x1b[0m", "")
    # the reply's text starts the one `hermes> ` line: none is left empty above the tool notes
    assert "hermes> No notes yet." in shown
    assert shown.count("hermes> ") == 1
    child.sendeof()
    child.expect(pexpect.EOF)


def test_ctrl_d_during_a_reply_quits_once_it_is_done(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("slow " * 40 + "THE END", chunk_size=5, chunk_delay=0.05))
    child = spawn_chat(gateway)
    child.expect("you> ")
    child.sendline("write a lot")
    child.expect("slow slow")
    child.sendeof()  # mid-reply
    child.expect("THE END")
    child.expect(pexpect.EOF, timeout=10)
    child.close()
    assert child.exitstatus == 0


def test_a_restart_mid_reply_is_waited_out(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    gw = GatewayProcess(
        tmp_path / "home2",
        {
            "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake"},
            "runner": {"drain_timeout_s": 0.5},
        },
    )
    fake_llm.push(text("slow " * 200, chunk_size=5, chunk_delay=0.1))
    try:
        gw.start()
        child = spawn_chat(gw)
        child.expect("you> ")
        child.sendline("write a lot")
        child.expect("slow slow")
        gw.signal(signal.SIGTERM)
        child.expect(r"the gateway is restarting")
        assert gw.wait(20) == 0
        gw.start()  # the message waited in the inbox; the model now echoes
        child.expect("echo: write a lot", timeout=30)
        child.expect("you> ")
        child.sendeof()
    finally:
        gw.kill()


def test_reconnects_across_a_gateway_restart(gateway: GatewayProcess, fake_llm: FakeOpenAI) -> None:
    child = spawn_chat(gateway)
    child.expect("you> ")
    child.sendline("first")
    child.expect("echo: first")
    child.expect("you> ")
    gateway.kill()
    child.sendline("second")
    child.expect(r"gateway unreachable; retrying")
    gateway.start()
    child.expect("echo: second", timeout=30)
    history = wait_until(lambda: len(gateway.history("tty")) >= 4 and gateway.history("tty"))
    assert [m["content"] for m in history] == ["first", "echo: first", "second", "echo: second"]
    child.sendeof()


def test_stop_typed_during_a_reply_stops_the_run_at_once(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    # 20 s of stream: `/stop` is typed as soon as the first words show; sent only after the
    # reply it would come 20 s late and find nothing running
    fake_llm.push(text("slow " * 400, chunk_size=5, chunk_delay=0.05))
    child = spawn_chat(gateway)
    child.expect("you> ")
    child.logfile_read = io.StringIO()
    child.sendline("write a lot")
    child.expect("slow slow")
    child.sendline("/stop")
    child.expect("Stopped.", timeout=8)
    child.expect("you> ", timeout=8)
    assert "Nothing is running" not in child.logfile_read.getvalue()
    # the reply went on printing until the run stopped, and was cut well short of its end
    assert child.logfile_read.getvalue().count("slow") < 300
    child.sendline("still there?")
    child.expect("echo: still there\\?")
    child.sendeof()
    child.expect(pexpect.EOF)
