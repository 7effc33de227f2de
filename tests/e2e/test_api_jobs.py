"""A scheduled job made in a local API session answers there: `hermes gateway run` on the fake
model, `hermes chat` (its client, in this process) asks for a reminder, the model creates the
job with the `cronjob` tool, and when it fires its answer shows in `hermes chat` from the
session's feed, is in the session's history (`GET /v1/history`), is recorded delivered, and the
session's next turn has it in its context."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_gateway.cli.chat import run_chat
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, Response, text, tool_calls
from tests.fakes.server import wait_until

pytestmark = pytest.mark.e2e
STRETCH = "Tell the user it is time to stretch."
ANSWER = "Time to stretch!"


def model(body: dict[str, Any]) -> Response:
    last = body["messages"][-1]
    said = str(last.get("content") or "")
    if last["role"] == "tool":
        return text(f"Done. {said}")
    if STRETCH in said:
        return text(ANSWER)
    if "stretch" in said:
        create = {"action": "create", "prompt": STRETCH, "schedule": "in 1s", "name": "stretch"}
        return tool_calls(("cronjob", create))
    return text(f"echo: {said}")


def gateway(home: Path, llm: FakeOpenAI) -> GatewayProcess:
    config = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "tools": {"enabled": ["cronjob"]},
        "scheduler": {"enabled": True, "timezone": "UTC", "tick_s": 0.2, "min_interval_s": 1},
    }
    return GatewayProcess(home, config)


class Terminal:
    """What `hermes chat` reads and writes: ``lines`` one at a time, then, once the job's
    answer has come unasked while the prompt waits, Ctrl-D."""

    def __init__(self, lines: list[str]) -> None:
        self.out = io.StringIO()
        self.lines = lines
        self.done = threading.Event()

    def read(self, prompt: str) -> str:
        if self.lines:
            return self.lines.pop(0)
        deadline = time.monotonic() + 30
        while ANSWER not in self.out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.done.set()
        raise EOFError


def test_a_job_made_in_hermes_chat_answers_in_it_and_in_the_session_history(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = model
    gw = gateway(tmp_path / "home", fake_llm)
    try:
        gw.start()
        wait_until(lambda: httpx.get(f"{gw.url}/readyz", timeout=2).status_code == 200)
        term = Terminal(["remind me in a second to stretch"])
        code = run_chat(gw.url, None, "alice", read=term.read, out=term.out)
        shown = term.out.getvalue()
        assert code == 0 and term.done.is_set(), shown
        assert "Done. Created job" in shown, shown
        assert f"hermes> {ANSWER}" in shown, shown  # from the feed, unasked
        history = httpx.get(f"{gw.url}/v1/history", params={"user": "alice"}, timeout=5).json()
        said = [m.get("content") for m in history["messages"] if m["role"] == "assistant"]
        assert said[-1] == ANSWER, said
        op = gw.operator
        [job] = httpx.get(f"{gw.url}/v1/cron/jobs", headers=op, timeout=5).json()["jobs"]
        url = f"{gw.url}/v1/cron/jobs/{job['id']}/runs"
        [run] = httpx.get(url, headers=op, timeout=5).json()["runs"]
        assert (run["status"], run["delivery"], run["output"]) == ("succeeded", "delivered", ANSWER)
        # the session's next turn knows what the job said
        body = {"model": "m", "user": "alice", "messages": [{"role": "user", "content": "ok"}]}
        reply = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=30).json()
        assert reply["choices"][0]["message"]["content"] == "echo: ok"
        [turn] = [r for r in fake_llm.requests if r["messages"][-1].get("content") == "ok"]
        assert ANSWER in json.dumps(turn["messages"])
    finally:
        gw.kill()
