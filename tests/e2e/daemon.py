"""Runs `hermes gateway run` as a real child process for end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from hermes_gateway.control.token import operator_token


def telegram_config(
    llm: Any, fake: Any, token: str, users: list[int], **sections: Any
) -> dict[str, Any]:
    """A daemon config on the fake model (``llm``) and the fake Telegram (``fake``, serving
    ``token``) with ``users`` allowed, plus further top-level ``sections``."""
    return {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": token,
                "base_url": fake.api_url,
                "base_file_url": fake.file_url,
                "allowed_users": users,
            }
        },
        **sections,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    """A gateway child process with its own home, config and control port."""

    def __init__(self, home: Path, config: dict[str, Any], env: dict[str, str] | None = None):
        self.home = home
        self.port = free_port()
        data = {
            "home": str(home),
            "control": {"port": self.port},
            "logging": {"format": "json"},
            **config,
        }
        data["control"] = {"port": self.port, **config.get("control", {})}
        self.configured_token: str | None = data["control"].get("token")
        self.config_path = home.parent / f"{home.name}-config.yaml"
        self.config_path.write_text(yaml.safe_dump(data))
        self.env = dict(os.environ)
        self.env.pop("NOTIFY_SOCKET", None)
        self.env.update(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path = home.parent / f"{home.name}-stderr.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def operator(self) -> dict[str, str]:
        """The bearer header the operator's commands send: the configured control token, else
        the one the gateway generated in its home (there once it has started)."""
        token = operator_token(self.configured_token, self.home)
        assert token is not None, f"no control token in the config nor in {self.home}"
        return {"Authorization": f"Bearer {token}"}

    def start(self, wait: bool = True) -> GatewayProcess:
        self._stderr = self.stderr_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hermes_gateway",
                "gateway",
                "run",
                "--config",
                str(self.config_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=self.env,
        )
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"gateway exited {self.proc.returncode}: {self.stderr()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"gateway not healthy within {timeout}s: {self.stderr()}")

    def chat(self, text: str, user: str = "e2e", timeout: float = 30, **kw: Any) -> httpx.Response:
        body = {"user": user, "messages": [{"role": "user", "content": text}], **kw}
        return httpx.post(f"{self.url}/v1/chat/completions", json=body, timeout=timeout)

    def history(self, user: str = "e2e") -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/v1/history", params={"user": user}, timeout=10)
        return list(r.json()["messages"])

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 15) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # where it hangs: the sentinel dumps every thread's stack on SIGUSR2
            self.proc.send_signal(signal.SIGUSR2)
            time.sleep(3)
            raise AssertionError(
                f"gateway still running after {timeout}s; stderr tail:\n{self.stderr(20000)}"
            ) from None
        self._stderr.close()
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if hasattr(self, "_stderr"):
            self._stderr.close()

    def stderr(self, tail: int = 4000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def story(self, tail: int = 80) -> str:
        """The last ``tail`` log events, one short line each: what a failed wait shows."""
        try:
            events = self.log_events()[-tail:]
        except (OSError, ValueError):
            return self.stderr()
        skip = {"event", "timestamp", "logger", "level"}
        lines = [
            f"{e.get('timestamp', '')} {e.get('level', '')} {e.get('event')} "
            + " ".join(f"{k}={str(v)[:120]}" for k, v in e.items() if k not in skip)
            for e in events
        ]
        return f"--- {self.home.name} ---\n" + "\n".join(lines)

    def log_events(self) -> list[dict[str, Any]]:
        """The log's lines so far; the last one only once it is whole (the gateway may be
        writing it as we read: a line cut short is not yet an event)."""
        text = (self.home / "logs" / "gateway.log").read_text()
        whole = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in whole.splitlines() if line.strip()]
