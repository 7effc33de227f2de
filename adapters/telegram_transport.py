"""Telegram transport pieces: the watched, sanitizing getUpdates request (what `/readyz` reports
about polling), the per-token lock file that keeps two gateways on one host apart, and media
downloads."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, cast

import structlog
from telegram import Bot, Update
from telegram.request import RequestData

from adapters.telegram_delivery import call
from adapters.telegram_http import AiohttpRequest
from hermes_gateway.errors import PermanentAdapterError
from hermes_gateway.events import Attachment
from hermes_gateway.retry import with_retry

log = structlog.get_logger("hermes.adapters.telegram")
POLL_BATCH = 20  # updates per getUpdates answer (`_Limited`)
INLINE_CHECK_BYTES = 4096  # a getUpdates answer this small (a few updates) is checked inline


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


class Intake:
    """Update ids PTB fetched and the gateway has not taken yet (persisted to its inbox).

    PTB confirms a batch to Telegram (the next getUpdates offset) as soon as it has queued it,
    before any handler ran: a crash in between lost those messages for good (issue 9, crash
    chaos). So the next getUpdates with an offset waits until the whole batch was taken.
    """

    warn_after = 10.0

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._settled = asyncio.Event()
        self._settled.set()

    def fetched(self, update_ids: list[int]) -> None:
        self._open.update(update_ids)
        if self._open:
            self._settled.clear()

    def taken(self, update_id: int) -> None:
        self._open.discard(update_id)
        if not self._open:
            self._settled.set()

    def reset(self) -> None:
        """Polling restarts: PTB fetches again whatever it had not queued."""
        self._open.clear()
        self._settled.set()

    async def settled(self) -> None:
        while not self._settled.is_set():  # the usual case: no timer, no task
            try:
                await asyncio.wait_for(self._settled.wait(), self.warn_after)
                return
            except TimeoutError:
                log.warning("telegram.intake_waiting", updates=sorted(self._open)[:10])


class PollRequest(AiohttpRequest):
    """The request object PTB's Updater uses for getUpdates only.

    It records each call in a `PollMonitor`, holds a getUpdates that would confirm updates the
    gateway has not taken yet (`Intake`), and replaces any update PTB cannot parse with a
    bare ``{"update_id": N}``: otherwise `Update.de_list` fails for the whole batch, PTB logs
    it, never advances its offset and re-polls the same batch in a tight loop.
    """

    def __init__(self, monitor: PollMonitor, intake: Intake, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.monitor = monitor
        self.intake = intake

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
        if request_data is not None and request_data.parameters.get("offset"):
            await self.intake.settled()
        # PTB's RequestData is final: a stand-in with what our transport reads
        request_data = cast(RequestData, _Limited(request_data))
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
            self.monitor.in_flight_since = None
        if code != 200:
            self.monitor.failed(_describe_error(code, payload))
            return code, payload
        if len(payload) > INLINE_CHECK_BYTES:
            # a worker thread: the check parses each update (~0.1 ms), the loop keeps its turns
            code, payload, update_ids = await asyncio.to_thread(sanitize_updates, payload)
        else:  # a few updates: cheaper here than the hop to a thread and back
            code, payload, update_ids = sanitize_updates(payload)
        if code == 200:
            self.monitor.ok()
            self.intake.fetched(update_ids)
        else:
            self.monitor.failed(_describe_error(code, payload))
        return code, payload


class _Limited:
    """getUpdates' parameters plus ``limit`` (PTB's Updater has no setting for it).

    PTB parses a whole batch in one go on the loop: a 100-update burst held the loop for
    ~25 ms (this check and PTB's parse). Slices of `POLL_BATCH` keep each stretch short, for
    one more round trip per slice of a burst; Telegram keeps the rest until it is asked.
    """

    def __init__(self, inner: RequestData | None) -> None:
        self._inner = inner or RequestData()

    @property
    def parameters(self) -> dict[str, Any]:
        return {**self._inner.parameters, "limit": POLL_BATCH}

    @property
    def json_parameters(self) -> dict[str, str]:
        return {**self._inner.json_parameters, "limit": str(POLL_BATCH)}

    @property
    def multipart_data(self) -> Any:
        return self._inner.multipart_data


def sanitize_updates(payload: bytes) -> tuple[int, bytes, list[int]]:
    """A getUpdates answer with every update PTB can parse, and placeholders for the rest;
    with the ids of the updates PTB will queue."""
    try:
        body = json.loads(payload)
    except ValueError:
        return 200, payload, []  # PTB reports invalid JSON as an error and backs off
    if not isinstance(body, dict) or not body.get("ok"):
        return 200, payload, []
    result = body.get("result")
    items = result if isinstance(result, list) else [result]
    clean: list[Any] = []
    for item in items:
        uid = item.get("update_id") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(uid, int) or isinstance(uid, bool):
            log.warning("telegram.update_unusable", reason="no update_id", update=repr(item)[:200])
            continue
        try:
            Update.de_json(item, None)
            clean.append(item)
        except Exception as exc:
            log.warning("telegram.update_unparseable", update_id=uid, error=repr(exc)[:200])
            clean.append({"update_id": uid})  # confirms it, so polling moves past it
    if items and not clean:
        # nothing to confirm: answering [] would make PTB re-poll at once, in a tight loop
        error = {"ok": False, "error_code": 502, "description": "unusable getUpdates answer"}
        return 502, json.dumps(error).encode(), []
    update_ids = [item["update_id"] for item in clean]
    if clean == result:
        return 200, payload, update_ids
    return 200, json.dumps({"ok": True, "result": clean}).encode(), update_ids


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


async def download_media(bot: Bot, attachment: Attachment, cap: int, folder: Path) -> Path:
    """Fetch ``attachment`` into ``folder`` through getFile; bigger than ``cap`` bytes (as
    announced, as getFile says, or as downloaded) raises `PermanentAdapterError`."""

    def check(size: int | None) -> None:
        if (size or 0) > cap:
            raise PermanentAdapterError(f"{attachment.name} is {size} bytes (the cap is {cap})")

    check(attachment.size)
    file = await with_retry(
        lambda: call(lambda: bot.get_file(attachment.file_id)), what="telegram.getFile"
    )
    check(file.file_size)
    data = await with_retry(lambda: call(file.download_as_bytearray), what="telegram.download")
    check(len(data))
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", attachment.name).lstrip(".") or "file"
    path = folder / f"{file.file_unique_id}-{name}"
    await asyncio.to_thread(_write, path, bytes(data))
    return path


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
