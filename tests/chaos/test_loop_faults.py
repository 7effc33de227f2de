"""Event-loop and worker faults: a hook that freezes the loop (the watchdog logs its stack, a
long freeze exits 75, and the restart answers the message once), and an agent thread stuck in a
tool that ignores interrupts (`/stop` and a new message still free the session at once; SIGTERM
still exits)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tests.chaos.crash import gateway_config
from tests.chaos.kit import ChaosTelegram, record, telegram_config
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, tool_calls
from tests.fakes.server import wait_until
from tests.harness import eventually, running_gateway
from tests.security import keys
from tools import catalog
from tools.files import ReadFileArgs
from tools.registry import ModelTool, ToolContext

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


class StuckTool(ModelTool):
    """A `read_file` stand-in that blocks its thread until released and ignores `/stop`, as a
    long C call would (a FIFO did this until the file tools learnt to refuse FIFOs)."""

    name = "read_file"
    description = "Blocks until the test releases it."
    parallel_safe = True
    Args = ReadFileArgs
    released = threading.Event()

    def call(self, args: ReadFileArgs, ctx: ToolContext) -> str:
        self.released.wait(60)
        return "released"


def make_stuck_tool(settings: object) -> StuckTool:
    return StuckTool()


@pytest.fixture
def stuck_tool(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[StuckTool]]:
    StuckTool.released.clear()
    stuck = f"{__name__}:make_stuck_tool"
    specs = tuple(
        replace(s, factory=stuck) if s.name == "read_file" else s for s in catalog.tool_specs()
    )
    monkeypatch.setattr(catalog, "tool_specs", lambda: specs)
    yield StuckTool
    StuckTool.released.set()  # the thread still in it goes home


class StuckFile:
    """A FIFO nobody writes to: `read_file` on it blocks its thread until `release`."""

    def __init__(self, workspace: Path) -> None:
        workspace.mkdir(parents=True, exist_ok=True)
        self.path = workspace / "stuck.fifo"
        os.mkfifo(self.path)

    def release(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # a reader is waiting: ends it
        os.close(fd)


@pytest.fixture
def stuck(tmp_path: Path) -> Iterator[StuckFile]:
    fifo = StuckFile(tmp_path / "home" / "workspace")
    yield fifo
    for _ in range(3):  # every thread still blocked on it goes home
        try:
            fifo.release()
        except OSError:
            break
        time.sleep(0.05)


@pytest.mark.usefixtures("fast_telegram")
@pytest.mark.parametrize("how", ["/stop", "a new message"])
@pytest.mark.usefixtures("stuck_tool")
async def test_a_thread_stuck_in_a_tool_does_not_hold_the_session(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, how: str
) -> None:
    llm.push(tool_calls(("read_file", {"path": "stuck.fifo"})))
    config = telegram_config(tmp_path, llm, tg, runner={"stop_grace_s": 0.5})
    async with running_gateway(config) as (gw, _):
        await eventually(lambda: gw.adapters["telegram"].health().ready)
        tg.send_text(1001, "read the stuck file")
        await eventually(lambda: gw.pool.busy == 1 and len(llm.requests) == 1)
        await asyncio.sleep(0.2)  # inside the tool now, deaf to interrupts
        started = time.monotonic()
        tg.send_text(1001, "/stop" if how == "/stop" else "never mind, say hi")
        await tg.wait_sent(1, chat_id=1001, timeout=10)
        if how == "/stop":
            tg.send_text(1001, "say hi")
        await tg.wait_sent(2 if how == "/stop" else 1, chat_id=1001, timeout=10)
        freed = time.monotonic() - started
        pool = gw.pool.snapshot()
        still_stuck = gw.pool.busy
    texts = [m["text"] for m in tg.messages_to(1001)]
    record(
        f"loop_stuck_tool_{'stop' if how == '/stop' else 'interrupt'}",
        {
            "fault": f"agent thread stuck in a tool, then {how}",
            "session_free_after_s": round(freed, 2),
            "abandoned_threads": pool["abandoned"],
        },
    )
    if how == "/stop":
        assert texts == ["Stopped.", "echo: say hi"]
    else:
        assert texts == ["echo: never mind, say hi"]
    assert freed < 3
    assert pool["abandoned"] == 1 and still_stuck == 1  # the thread is still in the tool


@pytest.mark.e2e
@pytest.mark.slow
def test_a_frozen_loop_exits_75_and_the_restart_answers_once(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram
) -> None:
    config = gateway_config(tg, llm, [1001])
    config["hooks"] = ["tests.e2e.blocking_hook:freeze_the_loop"]
    config["watchdog"] = {"interval_ms": 50, "warn_ms": 150, "fatal_s": 1.0}
    home = tmp_path / "home"
    gw = GatewayProcess(home, config)
    try:
        gw.start()
        wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200, 20)
        tg.send_text(1001, "please freeze 60")
        started = time.monotonic()
        code = gw.wait(20)
        exited_after = time.monotonic() - started
        frozen = [e for e in gw.log_events() if e["event"] == "loop.frozen"]
        gw.start()  # what systemd does for 75 (RestartForceExitStatus)
        wait_until(lambda: tg.messages_to(1001), timeout=20)
        time.sleep(0.5)
        gw.signal(signal.SIGTERM)
        assert gw.wait(15) == 0
    finally:
        gw.kill()
    record(
        "loop_frozen",
        {
            "fault": "a hook freezes the loop for 60 s (fatal_s 1)",
            "exit_code": code,
            "exited_after_s": round(exited_after, 2),
            "answered_after_restart": len(tg.messages_to(1001)),
        },
    )
    assert code == 75
    assert exited_after < 8
    assert frozen and "freeze_the_loop" in frozen[0]["stack"]
    assert [m["text"] for m in tg.messages_to(1001)] == ["echo: please freeze 60"]
    keys.assert_no_leaks(keys.log_files(home))


@pytest.mark.e2e
@pytest.mark.slow
def test_sigterm_exits_even_with_a_thread_stuck_in_a_tool(
    tmp_path: Path, llm: FakeOpenAI, tg: ChaosTelegram, stuck: StuckFile
) -> None:
    llm.push(tool_calls(("terminal", {"command": "cat stuck.fifo"})))
    gw = GatewayProcess(tmp_path / "home", gateway_config(tg, llm, [1001]))
    try:
        gw.start()
        wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200, 20)
        tg.send_text(1001, "read the stuck file")
        wait_until(lambda: len(llm.requests) == 1)
        time.sleep(0.3)
        started = time.monotonic()
        gw.signal(signal.SIGTERM)
        code = gw.wait(20)
        seconds = time.monotonic() - started
    finally:
        gw.kill()
    record(
        "loop_sigterm_stuck",
        {
            "fault": "SIGTERM with a thread stuck in a tool",
            "exit_code": code,
            "exited_after_s": round(seconds, 2),
        },
    )
    assert code == 0
    assert seconds < 3 + 1 + 5  # drain_timeout_s, the interrupt wait, slack
