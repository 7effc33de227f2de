"""`hermes gateway run` on a fresh home tells the person at the terminal what to do next, with
the real paths: chat, the dashboard, the config file to create, where the model's key goes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e

DEFAULT_PORT = 8642  # no config file: the built-in default


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_first_start_without_config_or_model_says_what_to_do(tmp_path: Path) -> None:
    if not _port_free(DEFAULT_PORT):
        pytest.skip(f"the default control port {DEFAULT_PORT} is taken here")
    home = tmp_path / "fresh"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "NOTIFY_SOCKET")}
    env.update(HERMES_HOME=str(home), HOME=str(tmp_path))
    err_path = tmp_path / "stderr.log"
    with err_path.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_gateway", "gateway", "run"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
        try:
            wait_until(lambda: "  home:" in err_path.read_text(), timeout=30)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    text = err_path.read_text()
    steps = text[text.index("Hermes is running.") :]
    assert "First start" in steps
    assert "hermes chat\n" in steps  # the config is where `hermes chat` looks by itself
    assert f"http://127.0.0.1:{DEFAULT_PORT}/dashboard/" in steps
    assert f"create {home / 'config.yaml'}" in steps
    assert f"OPENAI_API_KEY=... in {home / 'gateway.env'}" in steps
    assert "<home>" not in text
    # the structured lines are still there, each a JSON object
    events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    warning = next(e for e in events if e["event"] == "model.not_configured")
    assert str(home / "gateway.env") in warning["hint"]
    assert any(e["event"] == "gateway.ready" for e in events)


def test_a_first_start_with_a_config_names_it_and_a_later_start_is_quiet(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    gw = GatewayProcess(
        tmp_path / "home", {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake"}}
    )
    try:
        gw.start()
        wait_until(lambda: "  home:" in gw.stderr(), timeout=20)
        assert gw.chat("hi").status_code == 200
        gw.signal(signal.SIGTERM)
        assert gw.wait(20) == 0
        first = gw.stderr(100_000)
        gw.start()  # the home and its database are there now, and a model: nothing to tell
        assert gw.chat("again").status_code == 200
    finally:
        gw.kill()
    steps = first[first.index("Hermes is running.") :]
    assert "First start" in steps
    assert f"hermes chat --config {gw.config_path}" in steps
    assert f"http://127.0.0.1:{gw.port}/dashboard/" in steps
    assert f"config:        {gw.config_path}" in steps
    assert "model:" not in steps  # it has one
    assert gw.stderr(100_000).count("Hermes is running.") == 1
