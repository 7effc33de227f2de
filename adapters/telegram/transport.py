"""Telegram transport pieces: the watched getUpdates transport (what `/readyz` reports about
polling) and the per-token lock file that keeps two gateways on one host apart."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import structlog

from adapters.telegram.http import AiohttpRequest
from telegram.request import RequestData

log = structlog.get_logger("hermes.adapters.telegram")


class PollMonitor:
    """What the recent getUpdates calls did: the truth behind `health()` while polling."""

    settle = 2.0  # a long poll alive this long means Telegram took it: earlier errors are over

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.in_flight_since: float | None = None
        self.started = self.last_started = time.monotonic()
        self.last_ok = 0.0
        self.last_error = ""
        self.failures = 0  # in a row, since the last success

    def begin(self) -> None:
        self.in_flight_since = self.last_started = time.monotonic()

    def end(self) -> None:
        """The call is over, however it went (`ok` or `failed` says how)."""
        self.in_flight_since = None

    def ok(self) -> None:
        self.last_ok = time.monotonic()
        self.last_error = ""
        self.failures = 0

    def failed(self, error: str) -> None:
        self.last_error = error
        self.failures += 1

    def problem(self, stall_after: float) -> str | None:
        """Why polling is not healthy right now, or None.

        A long poll that has been running for `settle` seconds means Telegram took it, so an
        earlier error (a 409, a reset) is over; no successful answer for ``stall_after``
        seconds means polling is stuck, whatever the errors say.
        """
        now = time.monotonic()
        quiet = now - max(self.last_ok, self.started)
        if quiet > stall_after:
            last = f"; last error: {self.last_error}" if self.last_error else ""
            return f"polling stalled: no answer from getUpdates for {quiet:.0f} s{last}"
        running = None if self.in_flight_since is None else now - self.in_flight_since
        if self.last_error and (running is None or running < self.settle):
            return f"polling failing ({self.failures}x): {self.last_error}"
        return None

    def idle(self) -> float:
        """Seconds since the last getUpdates call began; 0 while one runs."""
        if self.in_flight_since is not None:
            return 0.0
        return time.monotonic() - self.last_started


class PollRequest(AiohttpRequest):
    """The transport getUpdates runs on (its own connections, so a long poll never holds up a
    reply): every call is recorded in a `PollMonitor`, with Telegram's own words for errors."""

    def __init__(self, monitor: PollMonitor, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.monitor = monitor

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = AiohttpRequest.DEFAULT_NONE,
        write_timeout: Any = AiohttpRequest.DEFAULT_NONE,
        connect_timeout: Any = AiohttpRequest.DEFAULT_NONE,
        pool_timeout: Any = AiohttpRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        self.monitor.begin()
        try:
            code, payload = await super().do_request(
                url,
                method,
                request_data,
                read_timeout,
                write_timeout,
                connect_timeout,
                pool_timeout,
            )
        except Exception as exc:
            self.monitor.failed(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.monitor.end()
        if code == 200:
            self.monitor.ok()
        else:
            self.monitor.failed(_describe_error(code, payload))
        return code, payload


def _describe_error(code: int, payload: bytes) -> str:
    try:
        description = json.loads(payload).get("description")
    except (ValueError, AttributeError):
        description = None
    if code == 409:
        return f"409 Conflict ({description or 'another getUpdates consumer'})"
    return f"HTTP {code}" + (f": {description}" if description else "")


class TokenLock:
    """An exclusive lock on ``<home>/telegram-<sha256(token)>.lock`` (the token is never
    written anywhere): only one gateway on this host polls a given bot. Blocking I/O: call
    `acquire`/`release` through `asyncio.to_thread`."""

    def __init__(self, home: Path, token: str) -> None:
        digest = hashlib.sha256(token.encode()).hexdigest()[:16]
        self.path = home / f"telegram-{digest}.lock"
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


async def bounded(coro: Any, seconds: float, what: str) -> None:
    """Await ``coro`` for at most ``seconds``; a failure or timeout is logged as ``what``
    (shutting down and restarting must go on whatever one step does)."""
    try:
        await asyncio.wait_for(coro, seconds)
    except Exception as exc:
        log.warning(what, error=repr(exc))
