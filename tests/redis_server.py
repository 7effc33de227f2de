"""Redis for the cluster tests: the server CI starts (HERMES_TEST_REDIS, a unix:// URL; tests
skip without it), and throwaway servers of their own on a Unix socket for tests that stop,
freeze or restart one (a socket file is reachable inside the loopback-only namespace)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest


def _for_this_worker(url: str) -> str:
    """The URL with a Redis database of this pytest-xdist worker's own (gw0 -> 1, gw1 -> 2):
    gateways of tests running at once on two workers would otherwise share key names (the
    `hermes:` prefix, the fake bots' poller leases) and take each other's leases."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not url or not worker.startswith("gw"):
        return url
    return f"{url}{'&' if '?' in url else '?'}db={1 + int(worker[2:]) % 15}"


SERVER = _for_this_worker(os.environ.get("HERMES_TEST_REDIS", ""))  # unix:///tmp/r/redis.sock
SOCKET = SERVER.removeprefix("unix://").partition("?")[0]  # the server's socket file
needs_redis = pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_REDIS (CI does)")


class RedisProcess:
    """A redis-server of the test's own, without persistence: a restart loses every key."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / "redis.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.socket.unlink(missing_ok=True)
        args = [binary, "--port", "0", "--unixsocket", str(self.socket), "--save", ""]
        args += ["--appendonly", "no", "--dir", str(self.directory)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.socket.exists():
            assert time.monotonic() < deadline, "redis-server did not start"
            assert self.proc.poll() is None, "redis-server exited"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def freeze(self, frozen: bool) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP if frozen else signal.SIGCONT)
