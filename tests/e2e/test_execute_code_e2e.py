"""`execute_code` through `hermes gateway run` on Telegram with the fake model: one model round
trip runs a script that calls three tools (and cannot see the gateway's files); a dangerous
`terminal` call from a script asks in the chat and `/deny` refuses it; `/stop` kills a running
script and what it started; `/healthz` answers all along."""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.e2e.test_telegram_e2e import TOKEN
from tests.fakes.openai import FakeOpenAI, text, tool_calls
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram
from tests.tools.test_terminal import _running
from tools import sandbox

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOOLS = ["read_file", "write_file", "search_files", "terminal", "web_extract", "execute_code"]


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


class Health:
    """Polls /healthz from a thread while a test runs; every answer must be a quick 200."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> Health:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            started = time.monotonic()
            try:
                status = httpx.get(f"{self.url}/healthz", timeout=5).status_code
            except httpx.HTTPError:
                status = 0
            self.answers.append((status, time.monotonic() - started))


def gateway(
    tmp_path: Path,
    llm: FakeOpenAI,
    fake: FakeTelegram,
    approval: str = "dangerous",
    limits: dict[str, Any] | None = None,
) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "base_url": fake.api_url,
                "base_file_url": fake.file_url,
                "allowed_users": [555],
            }
        },
        "tools": {
            "enabled": TOOLS,
            "terminal": {"approval": approval, "approval_timeout_s": 60},
            "execute_code": limits or {"timeout_s": 60},
        },
    }
    return GatewayProcess(tmp_path / "home", config)


def texts(fake: FakeTelegram) -> list[str]:
    return [str(m["text"]) for m in fake.messages_to(555)]


def sent_containing(fake: FakeTelegram, needle: str, timeout: float = 30) -> str:
    found: str = wait_until(
        lambda: next((t for t in texts(fake) if needle in t), None), timeout=timeout
    )
    return found


def observation(llm: FakeOpenAI) -> str:
    [tool] = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1:]
    return str(tool["content"])


def test_one_round_trip_runs_a_script_that_calls_three_tools(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    gw = gateway(tmp_path, fake_llm, tg)
    workspace = gw.home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("milk\neggs\nmilk chocolate\n")
    # the paths the script probes, read from a file: written into the code they would be
    # classified too (under pytest-xdist tmp_path holds "popen-gw0": "starts other programs")
    (workspace / "probe.txt").write_text(f"{gw.config_path}\n{gw.home / 'logs'}\n")
    script = """
        import os
        from hermes_tools import read_file, search_files, write_file
        lines = read_file("notes.txt").count("\\n") + 1
        milk = search_files("milk").count("notes.txt")
        write_file("report.txt", content=f"{lines} lines, {milk} with milk")
        print(f"SUMMARY {lines} lines, {milk} with milk")
        config, logs = open("probe.txt").read().splitlines()
        print("config readable:", len(open(config, "rb").read()) if os.path.exists(config) else 0)
        print("home visible:", os.path.exists(logs))
        """
    fake_llm.push(
        tool_calls(("execute_code", {"code": textwrap.dedent(script)})), text("Report written.")
    )
    try:
        gw.start()
        with Health(gw.url) as health:
            tg.send_text(555, "count the milk")
            sent_containing(tg, "Report written.")
    finally:
        gw.kill()
    assert len(fake_llm.requests) == 2  # the script's three calls cost no model round trip
    seen = observation(fake_llm)
    assert seen.startswith("SUMMARY 3 lines, 2 with milk\n"), seen
    assert "read_file x1" in seen and "search_files x1" in seen and "write_file x1" in seen
    if sandbox.current_mode() == "namespace":
        assert "config readable: 0" in seen  # covered by /dev/null, or its /tmp is private
        assert "home visible: False" in seen
    assert (workspace / "report.txt").read_text() == "3 lines, 2 with milk"
    assert health.answers and all(s == 200 for s, _ in health.answers), health.answers


def test_a_script_asks_for_approval_deny_refuses_and_stop_kills(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    gw = gateway(tmp_path, fake_llm, tg)
    (gw.home / "workspace" / "build").mkdir(parents=True)
    deleting = """
        from hermes_tools import ToolError, terminal
        try:
            print(terminal("rm -rf build"))
        except ToolError as exc:
            print("refused:", exc)
        """
    sleeping = "import subprocess\nsubprocess.run(['sleep', '60.031'])\nprint('woke')\n"
    fake_llm.push(
        tool_calls(("execute_code", {"code": textwrap.dedent(deleting)})), text("Left it alone.")
    )
    fake_llm.push(tool_calls(("execute_code", {"code": sleeping})), text("Slept."))
    try:
        gw.start()
        with Health(gw.url) as health:
            tg.send_text(555, "clean the build")
            notice = sent_containing(tg, "needs approval")
            assert "rm -rf build" in notice and "recursive delete" in notice
            tg.send_command(555, "/deny")
            sent_containing(tg, "Left it alone.")
            refused = observation(fake_llm)

            tg.send_text(555, "take a nap")
            notice = sent_containing(tg, "starts other programs")  # the script itself asks
            tg.send_command(555, "/approve")
            wait_until(lambda: _running("sleep 60.031"), timeout=30)
            tg.send_command(555, "/stop")
            sent_containing(tg, "Stopped.")
            wait_until(lambda: not _running("sleep 60.031"), timeout=15)
    finally:
        gw.kill()
    assert refused.startswith("refused: the user did not approve this command"), refused
    assert (gw.home / "workspace" / "build").is_dir()
    assert "Slept." not in texts(tg)
    assert health.answers and all(s == 200 for s, _ in health.answers), health.answers


CONTAINED = {
    "outside": """
        import os
        from hermes_tools import ToolError, read_file
        try:
            read_file("../home-config.yaml")
        except ToolError as exc:
            print("refused:", exc)
        # covered by /dev/null, or gone with the /tmp it was in: nothing to read either way
        print("direct:", len(open(CONFIG, "rb").read()) if os.path.exists(CONFIG) else 0)
        """,
    "ssrf": """
        from hermes_tools import web_extract
        web_extract(URL)
        """,
    "fork": """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
    "allocate": """
        hoard = []
        while True:
            hoard.append(bytearray(8 * 1024 * 1024))
        """,
    "print": """
        while True:
            print("x" * 999)
        """,
    "sigterm": """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
        """,
}


def test_every_escape_is_contained_and_the_gateway_stays_responsive(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    limits = {"timeout_s": 4, "memory_mb": 256, "max_processes": 16, "spill_max_bytes": 1 << 20}
    gw = gateway(tmp_path, fake_llm, tg, approval="off", limits=limits)
    prelude = f"CONFIG = {str(gw.config_path)!r}\nURL = {gw.url + '/healthz'!r}\n"
    calls = [
        ("execute_code", {"code": prelude + textwrap.dedent(code)}, f"call_{name}")
        for name, code in CONTAINED.items()
    ]
    fake_llm.push(tool_calls(*calls), text("All contained."))
    try:
        gw.start()
        with Health(gw.url) as health:
            tg.send_text(555, "try to break out")
            sent_containing(tg, "All contained.", timeout=90)
            gone = wait_until(lambda: not _running("hermes_tools._main"), timeout=15)
    finally:
        gw.kill()
    seen = {
        m["tool_call_id"].removeprefix("call_"): str(m["content"])
        for m in fake_llm.requests[-1]["messages"]
        if m["role"] == "tool"
    }
    assert "refused: path '../home-config.yaml' is outside the workspace" in seen["outside"]
    if sandbox.current_mode() == "namespace":
        assert "direct: 0" in seen["outside"], seen["outside"]
    assert "refused: 127.0.0.1 resolves to a private, loopback" in seen["ssrf"]
    assert "started more than 16 processes" in seen["fork"] or "timed out" in seen["fork"]
    assert "MemoryError" in seen["allocate"]
    assert "printed more than 1048576 bytes; the script was killed" in seen["print"]
    assert seen["sigterm"].startswith("Error: timed out after 4 s; the script was killed")
    assert gone
    assert len(health.answers) > 5 and all(s == 200 for s, _ in health.answers), health.answers
