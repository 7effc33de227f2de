"""Shared pieces of the hostile file-tool tests: a fake model that calls a tool when a message
names it, a real gateway process on it, a `/healthz` prober, and the tool children it runs."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, Response, text, tool_calls

WORKER = "search_walk.py"


def tool_responder(calls: dict[str, tuple[str, dict[str, Any]]]) -> Any:
    """A fake model: a user message starting with a key of ``calls`` gets that tool call; a
    tool result is answered 'observed: <result>'; anything else is echoed."""

    def respond(body: dict[str, Any]) -> Response:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text(f"observed: {last['content']}")
        said = str(last.get("content") or "")
        for key, (name, args) in calls.items():
            if said.startswith(key):
                return tool_calls((name, args))
        return text(f"echo: {said}")

    return respond


def gateway(home: Path, llm: FakeOpenAI, path: str, **sections: Any) -> GatewayProcess:
    """A real gateway on ``llm`` with ``PATH`` as given (it decides whether ripgrep is used)."""
    config = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "runner": {"stop_grace_s": 0.5, "drain_timeout_s": 2},
        **sections,
    }
    return GatewayProcess(home, config, env={"PATH": path})


def reply_text(gw: GatewayProcess, message: str, user: str, timeout: float = 60) -> str:
    r = gw.chat(message, user=user, timeout=timeout)
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


class Prober:
    """Asks `/healthz` every 0.2 s with a 1 s limit; `slow` lists the misses (seconds or -1)."""

    def __init__(self, gw: GatewayProcess) -> None:
        self.gw = gw
        self.answers: list[float] = []
        self.slow: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            started = time.monotonic()
            try:
                ok = httpx.get(f"{self.gw.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                ok = False
            took = time.monotonic() - started
            self.answers.append(took)
            if not ok or took > 1:
                self.slow.append(took if ok else -1)
            self._done.wait(0.2)

    @contextmanager
    def running(self) -> Iterator[Prober]:
        self._thread.start()
        try:
            yield self
        finally:
            self._done.set()
            self._thread.join(5)


def children(pid: int, needle: str) -> list[int]:
    """Processes whose parent is ``pid`` and whose command line holds ``needle``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and needle.encode() in cmdline:
            found.append(int(entry))
    return found
