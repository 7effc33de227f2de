"""The loop-lag watchdog against a real process: stacks on stalls, exit 75 on a freeze,
systemd notifications."""

from __future__ import annotations

import itertools
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e


def _config(fake_llm: FakeOpenAI, fatal_s: float) -> dict[str, object]:
    return {
        "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake"},
        "hooks": ["tests.e2e.blocking_hook:freeze_the_loop"],
        "watchdog": {"interval_ms": 50, "warn_ms": 150, "fatal_s": fatal_s},
    }


def test_a_stall_is_logged_with_the_culprits_stack(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm, fatal_s=30))
    try:
        gw.start()
        reply = gw.chat("please freeze 0.6")
        assert reply.status_code == 200  # the message is still answered
        lags = wait_until(
            lambda: [e for e in gw.log_events() if e["event"] == "loop.lag"], timeout=10
        )
    finally:
        gw.kill()
    stalled = next(e for e in lags if e.get("state") == "stalled")
    assert "freeze_the_loop" in stalled["stack"]
    recovered = next(e for e in lags if e.get("state") == "recovered")
    # the freeze is 600 ms; a ping goes out at most interval_ms (50) into it, later when the
    # watchdog thread itself waits for a busy machine: the lag is most of the freeze, not all
    assert 400 <= recovered["lag_ms"] <= 1000


def test_a_frozen_loop_exits_75(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm, fatal_s=1.0))
    try:
        gw.start()
        threading.Thread(target=lambda: _quiet(gw, "freeze 30"), daemon=True).start()
        started = time.monotonic()
        code = gw.wait(15)
    finally:
        gw.kill()
    assert code == 75
    assert time.monotonic() - started < 10
    frozen = [e for e in gw.log_events() if e["event"] == "loop.frozen"]
    assert frozen and "freeze_the_loop" in frozen[0]["stack"]


def test_systemd_notifications(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.2)
    got: list[str] = []
    beats: list[float] = []

    def listen() -> None:
        while "STOPPING=1" not in got:
            try:
                state = sock.recv(256).decode()
            except TimeoutError:
                continue
            except OSError:
                return
            got.append(state)
            if state == "WATCHDOG=1":
                beats.append(time.monotonic())

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm, 30), env={"NOTIFY_SOCKET": path})
    try:
        gw.start()
        wait_until(lambda: "READY=1" in got and len(beats) >= 5, timeout=10)
        frozen_at = time.monotonic()
        assert gw.chat("freeze 1.2").status_code == 200  # a hook blocks the loop for 1.2 s
        thawed_at = time.monotonic()
        wait_until(lambda: sum(b > thawed_at for b in beats) >= 3, timeout=10)  # it resumes
        gw.signal(signal.SIGTERM)
        assert gw.wait(10) == 0
        wait_until(lambda: "STOPPING=1" in got, timeout=5)
    finally:
        gw.kill()
        sock.close()
    assert got.index("READY=1") < got.index("STOPPING=1")
    # while the loop was blocked, systemd was not told all is well
    gaps = [b - a for a, b in itertools.pairwise(beats) if b > frozen_at]
    assert max(gaps) >= 1.0


def _quiet(gw: GatewayProcess, text: str) -> None:
    try:
        gw.chat(text, timeout=30)
    except Exception:
        pass
