"""The homeserver's client-server API through mautrix's `ClientAPI`, its failures as the
gateway's errors: a revoked token is `AdapterAuthError`, ``M_LIMIT_EXCEEDED`` a
`RateLimitedError` carrying the server's ``retry_after_ms`` (mautrix drops it from its own
error, so a response hook on the session reads it first), 5xx and network trouble transient,
any other refusal permanent."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

import aiohttp
from mautrix.api import HTTPAPI, Method, Path, PathBuilder
from mautrix.client import ClientAPI
from mautrix.errors import (
    MatrixConnectionError,
    MatrixInvalidToken,
    MatrixRequestError,
    MatrixResponseError,
)

from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
    header,
    retry_after_s,
)

T = TypeVar("T")
JSON = dict[str, Any]
# mautrix logs each request with its URL; the gateway logs what matters itself
_QUIET = logging.getLogger("hermes.adapters.matrix.mautrix")
_QUIET.setLevel(logging.WARNING)


async def _limits(response: aiohttp.ClientResponse) -> None:
    """A 429 as `RateLimitedError` with the wait the homeserver asked for (``retry_after_ms``
    in the body, or a ``Retry-After`` header; one second when it names neither)."""
    if response.status != 429:
        return
    wait: float | None = None
    try:
        body = await response.json(content_type=None)
        if isinstance(body, Mapping) and isinstance(body.get("retry_after_ms"), int | float):
            wait = float(body["retry_after_ms"]) / 1000
    except (ValueError, aiohttp.ClientError):
        pass
    if wait is None:
        wait = retry_after_s(header(response.headers))
    raise RateLimitedError("M_LIMIT_EXCEEDED", wait)


def client(homeserver: str, token: str, read_timeout: float) -> ClientAPI:
    """A client on a session of its own; ``read_timeout`` must outlast a /sync long poll."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=read_timeout)
    session = aiohttp.ClientSession(timeout=timeout, raise_for_status=_limits)
    http = HTTPAPI(
        homeserver.rstrip("/"),
        token,
        client_session=session,
        default_retry_count=0,
        log=cast(Any, _QUIET),
    )
    return ClientAPI(api=http)


def translate(exc: BaseException) -> AdapterError:
    if isinstance(exc, AdapterError):
        return exc
    if isinstance(exc, MatrixInvalidToken):
        return AdapterAuthError(
            f"platforms.matrix.access_token: the homeserver rejected the token ({exc.errcode})"
        )
    if isinstance(exc, MatrixRequestError):
        what = f"HTTP {exc.http_status} {exc.errcode}: {exc.message}"
        if exc.http_status >= 500 or exc.http_status in (0, 408):
            return TransientAdapterError(what)
        return PermanentAdapterError(what)
    if isinstance(exc, MatrixResponseError):
        return PermanentAdapterError(f"an answer without what it must have: {exc}")
    # MatrixConnectionError, aiohttp's errors, a timeout: the network
    return TransientAdapterError(f"{type(exc).__name__}: {exc}")


_NETWORK = (MatrixConnectionError, aiohttp.ClientError, asyncio.TimeoutError, OSError)


async def call(fn: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
    """One API call, its failures translated (``timeout``: bound it, for a send that must not
    hang on a half-open connection; a long poll bounds itself)."""
    try:
        if timeout is None:
            return await fn()
        return await asyncio.wait_for(fn(), timeout)
    except (AdapterError, MatrixRequestError, MatrixResponseError, *_NETWORK) as exc:
        raise translate(exc) from exc


async def raw(
    api: ClientAPI,
    method: Method,
    path: PathBuilder | str,
    *,
    query: Mapping[str, Any] | None = None,
    body: Any = None,
    timeout: float | None = 30.0,
) -> JSON:
    """A client-server call whose answer is kept as JSON (mautrix's typed answers refuse the
    odd shapes a homeserver may send; the adapter reads the fields itself)."""
    params = {k: str(v) for k, v in (query or {}).items()}
    answer = await call(
        lambda: api.api.request(method, path, content=body, query_params=params), timeout
    )
    if not isinstance(answer, dict):
        raise PermanentAdapterError(f"a non-object answer from {path}")
    return answer


__all__ = ["JSON", "Method", "Path", "call", "client", "raw", "translate"]
