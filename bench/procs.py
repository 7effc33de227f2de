"""The processes a bench run drives: the two fakes, `hermes gateway run` and the floor.

Each is a child of the bench with its own stderr file in the run's temp directory; every
wait here is bounded, and `stop` ends only the process it started.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "123:ABC"
WORKERS = 8  # runner.workers of the gateway, and the floor's pool


class BenchError(RuntimeError):
    """A process of the run failed to start or answer; the message says which and why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(root: Path = ROOT) -> dict[str, str]:
    """The environment of a child whose code comes from the checkout at ``root``."""
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)  # never let a child talk to systemd
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    return env


def _tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


class Child:
    """One child process; `stop` sends SIGTERM, waits, and kills only if it must. Its code
    comes from the checkout at ``root`` (this one, or the baseline's: ``--baseline``)."""

    def __init__(
        self, name: str, argv: list[str], workdir: Path, stdout: bool = False, root: Path = ROOT
    ) -> None:
        self.name = name
        self.stderr_path = workdir / f"{name}.stderr"
        self._stderr = self.stderr_path.open("ab")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv,
            cwd=root,
            env=child_env(root),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self.ps = psutil.Process(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_line(self, timeout: float) -> str:
        """The child's next stdout line (e.g. ``READY url``), waiting at most ``timeout`` s."""
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise BenchError(f"{self.name}: no output within {timeout}s\n{self.stderr()}")
        line = self.proc.stdout.readline().decode().strip()
        if not line:
            raise BenchError(f"{self.name} exited {self.proc.poll()}\n{self.stderr()}")
        return line

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"{self.name} exited {self.proc.returncode}\n{self.stderr()}")

    def cpu_s(self) -> float:
        """User + system CPU seconds of the whole process (every thread) so far."""
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def rss_mb(self) -> float:
        return float(self.ps.memory_info().rss) / 2**20

    def stderr(self) -> str:
        return _tail(self.stderr_path)

    def stop(self, timeout: float = 15) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        return self.proc.returncode


def start_fake(workdir: Path, kind: str, name: str) -> tuple[Child, str]:
    """A fake (``telegram``: its root URL; ``openai``: its …/v1 URL) as a process."""
    # the fake model keeps only the last request body: the gateway's carry its whole history
    args = ["--token", TOKEN] if kind == "telegram" else ["--api-key", "sk-fake", "--keep", "1"]
    child = Child(name, _module(f"tests.fakes.{kind}", *args), workdir, stdout=True)
    try:
        line = child.read_line(20)
    except BaseException:
        child.stop()
        raise
    if not line.startswith("READY "):
        child.stop()
        raise BenchError(f"{name} said {line!r}, not READY")
    return child, line.removeprefix("READY ").strip()


def _module(name: str, *args: str) -> list[str]:
    return [sys.executable, "-m", name, *args]


def gateway_config(
    home: Path, port: int, telegram: str, llm: str, lag_interval_ms: int
) -> dict[str, Any]:
    """The gateway under test: Telegram at the fake, the model at the fake LLM, 8 workers."""
    return {
        "home": str(home),
        "control": {"host": "127.0.0.1", "port": port},
        "model": {"base_url": llm, "api_key": "sk-fake", "timeout_s": 30},
        "runner": {"workers": WORKERS},
        "platforms": {
            "api": {"enabled": True},
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "base_url": f"{telegram}/bot",
                "base_file_url": f"{telegram}/file/bot",
                "allow_all": True,
                "typing": True,
            },
        },
        # More samples for the loop-lag histogram than the default 200 ms gives (README).
        "watchdog": {"interval_ms": lag_interval_ms},
        "logging": {"format": "json"},
    }


class Instance:
    """A started system under test (gateway or floor), ready for messages."""

    def __init__(self, kind: str, child: Child, control_url: str | None) -> None:
        self.kind = kind
        self.child = child
        self.control_url = control_url
        self.cold_start_s = 0.0  # spawn -> /healthz (gateway) or first getUpdates (floor)
        self.first_poll_s = 0.0  # spawn -> first getUpdates, for both

    def cpu_s(self) -> float:
        return self.child.cpu_s()

    def rss_mb(self) -> float:
        return self.child.rss_mb()

    async def idle_rss_mb(self, settle: float = 1.0, limit: float = 4.0) -> float:
        """RSS once it has stopped moving (within 1 % over ``settle`` s), at most ``limit`` s."""
        deadline = time.monotonic() + limit
        last = self.rss_mb()
        while time.monotonic() < deadline:
            await asyncio.sleep(settle)
            now = self.rss_mb()
            if abs(now - last) <= 0.01 * last:
                return now
            last = now
        return last

    async def get_text(self, http: aiohttp.ClientSession, path: str) -> str:
        assert self.control_url is not None
        async with http.get(f"{self.control_url}{path}") as resp:
            return await resp.text()

    def stop(self) -> None:
        code = self.child.stop()
        if code not in (0, -signal.SIGTERM):
            raise BenchError(f"{self.kind} exited {code} on SIGTERM\n{self.child.stderr()}")


def spawn_gateway(
    workdir: Path,
    telegram: str,
    llm: str,
    tag: str,
    lag_interval_ms: int,
    root: Path = ROOT,
    tune: Callable[[dict[str, Any]], None] | None = None,
) -> Instance:
    """This checkout's gateway, or (``root``) another checkout's, with the same config
    (``tune`` changes it in place: `bench.crowd`'s runs the default pool)."""
    home = workdir / f"home-{tag}"
    port = free_port()
    path = workdir / f"gateway-{tag}.yaml"
    config = gateway_config(home, port, telegram, llm, lag_interval_ms)
    if tune is not None:
        tune(config)
    path.write_text(yaml.safe_dump(config))
    argv = _module("hermes_gateway", "gateway", "run", "--config", str(path))
    child = Child(f"gateway-{tag}", argv, workdir, root=root)
    return Instance("gateway", child, f"http://127.0.0.1:{port}")


def spawn_echo(workdir: Path, telegram: str, llm: str, tag: str) -> Instance:
    argv = _module("bench.echo", "--telegram", telegram, "--token", TOKEN)
    return Instance("echo", Child(f"echo-{tag}", argv, workdir), None)


def spawn_floor(
    workdir: Path, telegram: str, llm: str, tag: str, workers: int = WORKERS
) -> Instance:
    argv = _module("bench.floor", "--telegram", telegram, "--token", TOKEN)
    argv += ["--openai", llm, "--workers", str(workers)]
    return Instance("floor", Child(f"floor-{tag}", argv, workdir), None)
