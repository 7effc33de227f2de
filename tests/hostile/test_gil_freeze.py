"""A thread that holds the GIL starves the loop and the watchdog thread alike: the sentinel's
watcher process sees it from outside, logs every thread's stack and kills the gateway within
fatal_s plus its grace; it never outlives the gateway and never fires on a healthy loop."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_gateway.config.schema import WatchdogConfig
from hermes_gateway.liveness.sentinel import grace_s
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e
WATCHDOG = {"interval_ms": 50, "warn_ms": 150, "fatal_s": 2.0}
# after the watcher's deadline: its wait for the dump (2 s at most), the kill, a loaded CI box
SLACK_S = 4.0


def _config(fake_llm: FakeOpenAI, **extra: Any) -> dict[str, Any]:
    return {
        "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake"},
        "hooks": ["tests.hostile.gil_hook:hold_the_gil"],
        "watchdog": WATCHDOG,
        **extra,
    }


def _watcher_pid(gw: GatewayProcess) -> int:
    started = wait_until(
        lambda: [e for e in gw.log_events() if e["event"] == "sentinel.started"], timeout=10
    )
    pid = int(started[-1]["pid"])
    assert gw.proc is not None and _parent_of(pid) == gw.proc.pid
    return pid


def _parent_of(pid: int) -> int | None:
    """The parent of a live process; None once it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return None if state in ("Z", "X") else int(ppid)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _send(gw: GatewayProcess, message: str) -> None:
    def post() -> None:
        try:
            gw.chat(message, timeout=30)
        except Exception:
            pass  # the gateway is killed under it

    threading.Thread(target=post, daemon=True).start()


def test_a_thread_holding_the_gil_is_killed_with_every_stack_logged(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home = tmp_path / "home"
    marker = tmp_path / "freeze-once"
    marker.touch()
    gw = GatewayProcess(home, _config(fake_llm))
    try:
        gw.start()
        _send(gw, f"hold the gil {marker}")
        wait_until(lambda: not marker.exists(), timeout=10)  # the regex is running now
        started = time.monotonic()
        code = gw.wait(WATCHDOG["fatal_s"] + grace_s(WatchdogConfig(**WATCHDOG)) + SLACK_S)
        ended_after = time.monotonic() - started
        frozen = [e for e in gw.log_events() if e["event"] == "loop.frozen"]
        journal = gw.stderr_path.read_text()
        gw.start()  # what systemd does (Restart=always); the replayed message is harmless now
        assert gw.chat("are you back?").json()["choices"][0]["message"]["content"] == (
            "echo: are you back?"
        )
        gw.signal(signal.SIGTERM)
        assert gw.wait(15) == 0
    finally:
        gw.kill()
    assert code == -signal.SIGKILL
    assert ended_after >= WATCHDOG["fatal_s"]
    [event] = frozen
    assert event["level"] == "critical" and event["logger"] == "hermes.sentinel"
    # faulthandler's dump names the C call and who made it, among every thread's stack
    assert 'in match\n  File "' in event["stack"]
    assert "gil_hook.py" in event["stack"] and "in backtrack_for_minutes" in event["stack"]
    assert event["stack"].count("Thread 0x") >= 3
    assert '"loop.frozen"' in journal and "backtrack_for_minutes" in journal  # stderr too


def test_a_frozen_loop_where_python_runs_still_exits_75(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The watchdog thread's exit 75 comes first; the watcher's grace leaves it room."""
    config = _config(fake_llm)
    config["hooks"].append("tests.e2e.blocking_hook:freeze_the_loop")
    gw = GatewayProcess(tmp_path / "home", config)
    try:
        gw.start()
        _send(gw, "freeze 30")  # time.sleep on the loop: the GIL is free
        code = gw.wait(WATCHDOG["fatal_s"] + grace_s(WatchdogConfig(**WATCHDOG)) + SLACK_S)
    finally:
        gw.kill()
    assert code == 75
    [event] = [e for e in gw.log_events() if e["event"] == "loop.frozen"]
    assert event["logger"] == "hermes.watchdog"
    assert "freeze_the_loop" in event["stack"]
    assert "Thread hermes-watchdog:" in event["threads"]  # every thread, not only the loop


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_watcher_never_outlives_the_gateway(
    tmp_path: Path, fake_llm: FakeOpenAI, stop: signal.Signals
) -> None:
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm))
    try:
        gw.start()
        watcher = _watcher_pid(gw)
        gw.signal(stop)
        code = gw.wait(15)
        wait_until(lambda: _parent_of(watcher) is None, timeout=5)
    finally:
        gw.kill()
    assert code == (0 if stop == signal.SIGTERM else -signal.SIGKILL)


@pytest.mark.slow  # the other false-alarm cases stay in the default suite
def test_a_long_healthy_drain_is_not_a_freeze(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    """The watcher beats on through a shutdown drain longer than its deadline."""
    fake_llm.push(text("slow but fine", delay=6.0))
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm, runner={"drain_timeout_s": 20}))
    try:
        gw.start()
        watcher = _watcher_pid(gw)
        _send(gw, "take your time")
        wait_until(lambda: len(fake_llm.requests) == 1, timeout=10)
        gw.signal(signal.SIGTERM)
        time.sleep(4.5)  # past fatal_s + grace, still draining
        watching_during_drain = _parent_of(watcher)
        code = gw.wait(20)
    finally:
        gw.kill()
    assert gw.proc is not None and watching_during_drain == gw.proc.pid
    assert code == 0
    assert not [e for e in gw.log_events() if e["event"] == "loop.frozen"]


def test_a_thread_busy_in_python_is_not_a_freeze(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    """It shares the GIL: the loop keeps beating, /healthz answers, nothing fires."""
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm))
    try:
        gw.start()
        watcher = _watcher_pid(gw)
        assert gw.proc is not None
        cpu_before = _cpu_s(gw.proc.pid)
        assert gw.chat("busy python 6").status_code == 200
        started = time.monotonic()
        while time.monotonic() - started < 6.5:  # past fatal_s + grace, twice over
            assert httpx.get(f"{gw.url}/healthz", timeout=2).status_code == 200
            time.sleep(0.2)
        assert _cpu_s(gw.proc.pid) - cpu_before > 2.0  # the busy thread did run
        assert _parent_of(watcher) == gw.proc.pid
    finally:
        gw.kill()
    assert not [e for e in gw.log_events() if e["event"] == "loop.frozen"]


@pytest.mark.slow  # the other false-alarm cases stay in the default suite
def test_a_watcher_that_was_not_scheduled_does_not_fire(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Beats that waited in the pipe while the watcher was stopped prove the loop was alive."""
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm))
    try:
        gw.start()
        watcher = _watcher_pid(gw)
        os.kill(watcher, signal.SIGSTOP)
        time.sleep(4.5)  # longer than its deadline
        os.kill(watcher, signal.SIGCONT)
        time.sleep(1.0)
        assert gw.proc is not None and gw.proc.poll() is None
        assert gw.chat("still there?").status_code == 200
        assert _parent_of(watcher) == gw.proc.pid
    finally:
        gw.kill()
    assert not [e for e in gw.log_events() if e["event"] == "loop.frozen"]


def test_sigusr2_logs_every_stack_and_changes_nothing(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm))
    try:
        gw.start()
        watcher = _watcher_pid(gw)
        gw.signal(signal.SIGUSR2)
        [dumped] = wait_until(
            lambda: [e for e in gw.log_events() if e["event"] == "stacks.dumped"], timeout=30
        )
        assert gw.chat("still there?").status_code == 200
        assert gw.proc is not None and _parent_of(watcher) == gw.proc.pid
    finally:
        gw.kill()
    assert "hermes_gateway/liveness/watchdog.py" in dumped["stack"]  # the watchdog thread, waiting
    assert "Current thread 0x" in dumped["stack"]


def test_sigusr2_all_through_a_start_never_crashes_the_gateway(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """An operator's dump signal, sent every 10 ms from the sentinel's start until a second
    after `gateway.ready` (threads of the store's opening start and end meanwhile): it was
    handled by faulthandler, which walks the threads without a lock from the signal handler,
    and the gateway died of SIGSEGV about once in 20 starts with a single signal."""
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm))
    sent, ready_at = 0, None
    try:
        gw.start(wait=False)
        wait_until(lambda: (gw.home / "logs" / "gateway.log").exists(), timeout=30)
        _watcher_pid(gw)  # from here the signal has a handler (before: its default, the end)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (ready_at is None or time.monotonic() < ready_at):
            assert gw.proc is not None and gw.proc.poll() is None, f"exit {gw.proc.poll()}"
            gw.signal(signal.SIGUSR2)
            sent += 1
            time.sleep(0.01)
            if ready_at is None and sent % 10 == 0 and _events(gw, "gateway.ready"):
                ready_at = time.monotonic() + 1.0
        time.sleep(0.5)
        assert gw.proc is not None and gw.proc.poll() is None, f"exit {gw.proc.poll()}"
        assert gw.chat("still there?").status_code == 200
    finally:
        gw.kill()
    assert ready_at is not None, gw.stderr()
    assert sent >= 50 and _events(gw, "stacks.dumped")


def test_a_killed_watcher_is_replaced(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    gw = GatewayProcess(tmp_path / "home", _config(fake_llm))
    try:
        gw.start()
        first = _watcher_pid(gw)
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: len(_events(gw, "sentinel.started")) == 2, timeout=20)
        second = _watcher_pid(gw)
        assert _parent_of(first) is None
    finally:
        gw.kill()
    assert second != first
    [lost] = _events(gw, "sentinel.lost")
    assert lost["level"] == "error"


def _events(gw: GatewayProcess, name: str) -> list[dict[str, Any]]:
    return [e for e in gw.log_events() if e["event"] == name]
