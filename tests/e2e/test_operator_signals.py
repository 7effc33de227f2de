"""What an operator sees of the real process: `/metrics` (model calls, tokens, the process's
RSS and fds) and log lines that carry their reason (failed runs, tools, model retries)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.daemon import GatewayProcess, free_port
from tests.fakes.openai import FakeOpenAI, error, text, tool_calls
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body = httpx.get(f"{url}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def test_model_calls_tokens_errors_and_the_process_are_measured(
    gateway: GatewayProcess, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(text("hi", usage={"prompt_tokens": 120, "completion_tokens": 7}))
    fake_llm.push(error(503))
    gateway.start()
    assert gateway.chat("one", user="a").status_code == 200
    gateway.chat("two", user="b")
    m = _samples(gateway.url)
    assert m[("hermes_model_call_duration_seconds_count", (("outcome", "ok"),))] == 1
    assert m[("hermes_model_call_duration_seconds_count", (("outcome", "error"),))] == 1
    assert m[("hermes_model_errors_total", (("status", "503"),))] == 1
    assert m[("hermes_model_tokens_total", (("kind", "prompt"),))] == 120
    assert m[("hermes_model_tokens_total", (("kind", "completion"),))] == 7
    assert m[("process_resident_memory_bytes", ())] > 10_000_000
    assert m[("process_open_fds", ())] > 0


def test_failures_are_logged_with_their_reason(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.push(tool_calls(("read_file", {"path": "no-such-file.txt"})), text("done"))
    fake_llm.push(error(400, message="context too long"))
    gw = GatewayProcess(
        tmp_path / "home",
        {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}},
    )
    try:
        gw.start()
        gw.chat("read it", user="a")
        gw.chat("too long", user="b")
        # run.finished follows the delivery of the answer the chat call returned with
        wait_until(lambda: sum(e["event"] == "run.finished" for e in gw.log_events()) == 2)
        events = gw.log_events()
    finally:
        gw.kill()
    tool = next(e for e in events if e["event"] == "tool.call")
    assert tool["ok"] is False and "no-such-file.txt" in tool["error"]
    failed = [e for e in events if e["event"] == "run.finished" and e["status"] == "failed"]
    assert failed and failed[0]["level"] == "warning" and "400" in failed[0]["error"]


def test_a_model_retry_names_the_url_and_the_cause(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    gw = GatewayProcess(
        tmp_path / "home",
        {"model": {"base_url": dead, "api_key": "sk-fake", "max_retries": 1}},
    )
    try:
        gw.start()
        gw.chat("anyone there?")
        events = gw.log_events()
    finally:
        gw.kill()
    retry = next(e for e in events if e["event"] == "model.retry")
    assert retry["url"] == dead
    assert "Connect" in retry["cause"] and "refused" in retry["cause"].lower()


def test_with_no_model_startup_and_readyz_say_what_to_set(tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "home", {"model": {"api_key": ""}})
    try:
        gw.start()
        ready = httpx.get(f"{gw.url}/readyz", timeout=5)
        reply = gw.chat("hello?")
        answer = reply.json()["error"]["message"]  # an API client gets 503 and the text
        events = gw.log_events()
    finally:
        gw.kill()
    assert ready.status_code == 503
    assert any("model: not configured" in r for r in ready.json()["reasons"])
    assert reply.status_code == 503 and "No model is configured" in answer
    assert str(gw.config_path) in answer  # the file to edit, by name
    started = next(e for e in events if e["event"] == "gateway.ready")
    assert started["home"] == str(tmp_path / "home") and started["config"] == str(gw.config_path)
    assert any(e["event"] == "model.not_configured" for e in events)


def test_a_foreground_run_keeps_its_files_private(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    home = tmp_path / "home"
    gw = GatewayProcess(home, {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake"}})
    try:
        gw.start()
        assert gw.chat("hello").status_code == 200
    finally:
        gw.kill()
    for path in (home, home / "logs", home / "workspace"):
        assert path.stat().st_mode & 0o777 == 0o700, path
    for path in (home / "state.db", home / "logs" / "gateway.log"):
        assert path.stat().st_mode & 0o777 == 0o600, path
