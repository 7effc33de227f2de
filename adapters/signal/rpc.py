"""The signal-cli daemon's JSON-RPC 2.0 over HTTP (``daemon --http``): one call is one
``POST /api/v1/rpc``; a JSON-RPC error object becomes the gateway's `AdapterError` kinds."""

from __future__ import annotations

import itertools
from typing import Any

import aiohttp
import structlog

from hermes_gateway.platforms import (
    PermanentAdapterError,
    RateLimitedError,
    RequestError,
    TransientAdapterError,
    loads,
)

log = structlog.get_logger("hermes.adapters.signal")
RPC_PATH = "/api/v1/rpc"
CHECK_PATH = "/api/v1/check"
EVENTS_PATH = "/api/v1/events"
# signal-cli's error codes beyond JSON-RPC's own: -3 an I/O failure talking to Signal's
# servers (worth a retry), -5 Signal's rate limit
TRANSIENT_CODES = frozenset({-3, -32603})
RATE_LIMITED = -5
RATE_LIMIT_WAIT_S = 10.0  # signal-cli does not say how long; Signal's limits are per minute
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a getAttachment answer carries the file in base64


class RpcError(PermanentAdapterError):
    """The daemon answered the call with a JSON-RPC error it will answer again."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"signal-cli {method}: {message} (code {code})")
        self.code = code


class Unreached(TransientAdapterError):
    """The call never reached the daemon (the connection was refused): safe to repeat."""


class Daemon:
    """Calls on one daemon, on a keep-alive aiohttp session opened on first use. Nothing is
    retried here: a `send` whose answer was lost may have gone out, so its caller decides."""

    def __init__(self, base_url: str, account: str, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.account = account
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=5)
        self._session: aiohttp.ClientSession | None = None
        self._events: aiohttp.ClientSession | None = None
        self._ids = itertools.count(1)

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(trust_env=False)
        return self._session

    def stream_session(self) -> aiohttp.ClientSession:
        """The event stream's own session: a long line (an envelope) fits its read buffer, and
        closing it ends the stream without touching the calls in flight."""
        if self._events is None or self._events.closed:
            self._events = aiohttp.ClientSession(trust_env=False, read_bufsize=1024 * 1024)
        return self._events

    async def close(self) -> None:
        for session in (self._session, self._events):
            if session is not None:
                await session.close()
        self._session = self._events = None

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The call's ``result``; `TransientAdapterError` when the daemon cannot be reached or
        failed for now, `RateLimitedError` at Signal's limit, `RpcError` otherwise."""
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params:
            body["params"] = params
        url = self.base_url + RPC_PATH
        try:
            async with self.session().post(url, json=body, timeout=self.timeout) as resp:
                if resp.status >= 500 or resp.status in (404, 408, 429):
                    raise TransientAdapterError(f"signal-cli {method}: HTTP {resp.status}")
                raw = await resp.content.read(MAX_ANSWER_BYTES + 1)
        except aiohttp.ClientConnectorError as exc:
            raise Unreached(f"signal-cli {method}: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            # the request may have been taken (a send may have gone out): not repeated here
            reason = str(exc) or type(exc).__name__
            raise TransientAdapterError(f"signal-cli {method}: {reason}") from exc
        return answer(method, raw)

    async def check(self) -> bool:
        """``GET /api/v1/check``: the daemon runs."""
        try:
            url = self.base_url + CHECK_PATH
            async with self.session().get(url, timeout=self.timeout) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False


def answer(method: str, raw: bytes) -> Any:
    """The ``result`` of one JSON-RPC answer body, or the error it holds as an `AdapterError`."""
    if len(raw) > MAX_ANSWER_BYTES:
        raise PermanentAdapterError(f"signal-cli {method}: the answer is too large")
    try:
        data = loads(raw)
    except RequestError as exc:
        raise TransientAdapterError(f"signal-cli {method}: not JSON-RPC ({exc})") from None
    if not isinstance(data, dict):
        raise TransientAdapterError(f"signal-cli {method}: not a JSON-RPC answer")
    error = data.get("error")
    if error is None:
        return data.get("result")
    code = error.get("code") if isinstance(error, dict) else None
    code = code if isinstance(code, int) else 0
    message = str(error.get("message") or "") if isinstance(error, dict) else str(error)
    if code == RATE_LIMITED:
        raise RateLimitedError(f"signal-cli {method}: {message}", RATE_LIMIT_WAIT_S)
    if code in TRANSIENT_CODES:
        raise TransientAdapterError(f"signal-cli {method}: {message} (code {code})")
    raise RpcError(method, code, message)
