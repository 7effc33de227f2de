"""SIGTERM while the local API is answering: open streams end with `[DONE]`, waiting clients get
a 503, and the process exits within the drain, well inside systemd's TimeoutStopSec."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e
DRAIN = 2.0


@pytest.fixture
def gateway(tmp_path: Path, fake_llm: FakeOpenAI) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        tmp_path / "home",
        {
            "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0},
            "runner": {"drain_timeout_s": DRAIN},
        },
    )
    yield gw
    gw.kill()


def _body(user: str, stream: bool) -> dict[str, Any]:
    return {"user": user, "stream": stream, "messages": [{"role": "user", "content": "tell"}]}


def test_sigterm_closes_an_open_stream_and_exits_within_the_drain(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    # a slow model: one word a second for a minute
    fake_llm.push(text("word " * 60, chunk_size=5, chunk_delay=1.0))
    gateway.start()
    lines: list[str] = []
    first = threading.Event()

    def client() -> None:
        url = f"{gateway.url}/v1/chat/completions"
        with httpx.stream("POST", url, json=_body("s", True), timeout=60) as r:
            for line in r.iter_lines():
                if line:
                    lines.append(line)
                    if "word" in line:
                        first.set()

    reader = threading.Thread(target=client, daemon=True)
    reader.start()
    assert first.wait(20), gateway.stderr()
    started = time.monotonic()
    gateway.signal(signal.SIGTERM)
    assert gateway.wait(30) == 0
    took = time.monotonic() - started
    reader.join(5)
    assert took < DRAIN + 6, took
    # the text so far, then an error event (OpenAI SDKs raise it), then the end of the stream
    assert lines[-1] == "data: [DONE]", lines[-3:]
    assert json.loads(lines[-2][6:])["error"]["code"] == "shutting_down"
    assert "word" in lines[-3]
    finished = [e for e in gateway.log_events() if e["event"] == "run.finished"]
    assert [e["status"] for e in finished] == ["interrupted"]  # cut short, not "crashed"


def test_sigterm_answers_a_waiting_request_with_503(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    # slow, and streamed to the gateway: the fake notices the gateway going away at once
    fake_llm.push(text("late " * 60, chunk_size=5, chunk_delay=1.0))
    gateway.start()
    result: dict[str, Any] = {}

    def client() -> None:
        url = f"{gateway.url}/v1/chat/completions"
        r = httpx.post(url, json=_body("w", False), timeout=60)
        result["status"], result["body"] = r.status_code, r.json()

    waiter = threading.Thread(target=client, daemon=True)
    waiter.start()
    wait_until(lambda: len(fake_llm.requests) == 1)
    started = time.monotonic()
    gateway.signal(signal.SIGTERM)
    assert gateway.wait(30) == 0
    assert time.monotonic() - started < DRAIN + 6
    waiter.join(5)
    assert result["status"] == 503, result
    assert result["body"]["error"]["code"] == "shutting_down"


def test_a_second_sigterm_cuts_the_drain_short_and_still_closes_the_stream(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("word " * 60, chunk_size=5, chunk_delay=1.0))
    gw = GatewayProcess(  # the default 8 s drain
        tmp_path / "home2",
        {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}},
    )
    lines: list[str] = []
    first = threading.Event()

    def client() -> None:
        url = f"{gw.url}/v1/chat/completions"
        with httpx.stream("POST", url, json=_body("s2", True), timeout=60) as r:
            for line in r.iter_lines():
                if line:
                    lines.append(line)
                    first.set()

    try:
        gw.start()
        reader = threading.Thread(target=client, daemon=True)
        reader.start()
        assert first.wait(20), gw.stderr()
        gw.signal(signal.SIGTERM)
        time.sleep(0.3)
        started = time.monotonic()
        gw.signal(signal.SIGTERM)
        assert gw.wait(30) == 0
        assert time.monotonic() - started < 6  # not the 8 s drain
        reader.join(5)
    finally:
        gw.kill()
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["error"]["code"] == "shutting_down"
