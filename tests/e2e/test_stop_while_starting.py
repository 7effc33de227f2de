"""A SIGTERM at any moment of `hermes gateway run`'s start ends it promptly with exit 0: while
it imports (before the event loop has its signal handlers), while the store is being opened
and while an adapter is still connecting (their servers do not answer). A second signal
forces the stop."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.security import keys

pytestmark = pytest.mark.e2e
PROMPT_S = 8.0  # the start it interrupts would wait 10 s (store) or 16 s (adapter) more


def config(llm: FakeOpenAI, **sections: Any) -> dict[str, Any]:
    return {"model": {"base_url": llm.base_url, "api_key": "sk-fake"}, **sections}


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A base URL whose server takes connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not done.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/api/"
    finally:
        done.set()
        thread.join(2)
        for conn in held:
            conn.close()
        listener.close()


def handles_sigterm(gw: GatewayProcess) -> bool:
    """The process has a SIGTERM handler: the interpreter has started (a signal before that
    ends any Python program by the default action)."""
    assert gw.proc is not None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{gw.proc.pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def logged(gw: GatewayProcess, event: str) -> bool:
    path = gw.home / "logs" / "gateway.log"
    return path.exists() and f'"{event}"' in path.read_text()


def stopped_within(gw: GatewayProcess, *signals: signal.Signals) -> tuple[int, float]:
    began = time.monotonic()
    for sig in signals:
        gw.signal(sig)
        time.sleep(0.2)
    code = gw.wait(PROMPT_S * 3)  # a failure shows the real figure, not a timeout
    return code, time.monotonic() - began


@pytest.mark.parametrize("after_s", [0.0, 0.5, 1.5])
def test_a_stop_while_it_imports_or_opens_the_store_exits_0_at_once(
    tmp_path: Path, fake_llm: FakeOpenAI, after_s: float
) -> None:
    """The store is a PostgreSQL server that does not answer: opening it would wait 10 s."""
    with silent_server() as url:
        store = {"url": f"postgresql+asyncpg://hermes@{url.split('/')[2]}/hermes"}
        gw = GatewayProcess(tmp_path / "home", config(fake_llm, store=store)).start(wait=False)
        try:
            wait_until(lambda: handles_sigterm(gw), timeout=60, interval=0.005)
            time.sleep(after_s)
            code, took = stopped_within(gw, signal.SIGTERM)
        finally:
            gw.kill()
    assert (code, took < PROMPT_S) == (0, True), gw.stderr()


def test_a_stop_while_the_store_opens_exits_0_at_once(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    with silent_server() as url:
        store = {"url": f"postgresql+asyncpg://hermes@{url.split('/')[2]}/hermes"}
        gw = GatewayProcess(tmp_path / "home", config(fake_llm, store=store)).start(wait=False)
        try:
            wait_until(lambda: logged(gw, "sentinel.started"), timeout=60)  # just before it
            time.sleep(0.5)
            code, took = stopped_within(gw, signal.SIGTERM)
        finally:
            gw.kill()
    events = [e["event"] for e in gw.log_events()]
    assert (code, took < PROMPT_S) == (0, True), gw.stderr()
    assert "gateway.start_abandoned" in events and events[-1] == "gateway.stopped"


@pytest.mark.parametrize("signals", [1, 2])
def test_a_stop_while_an_adapter_connects_exits_0_at_once(
    tmp_path: Path, fake_llm: FakeOpenAI, signals: int
) -> None:
    with silent_server() as api_base:
        slack = {
            "enabled": True,
            "mode": "http",
            "bot_token": keys.SLACK_BOT_TOKEN,
            "signing_secret": keys.SLACK_SIGNING_SECRET,
            "api_base": api_base,
            "allow_all": True,
        }
        gw = GatewayProcess(tmp_path / "home", config(fake_llm, platforms={"slack": slack}))
        gw.start(wait=False)
        try:
            wait_until(lambda: logged(gw, "control.listening"), timeout=60)  # adapters next
            time.sleep(0.5)
            code, took = stopped_within(gw, *[signal.SIGTERM] * signals)
        finally:
            gw.kill()
    events = [e["event"] for e in gw.log_events()]
    assert (code, took < PROMPT_S) == (0, True), gw.stderr()
    assert "gateway.start_abandoned" in events and "gateway.ready" not in events
