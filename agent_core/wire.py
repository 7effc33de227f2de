"""The HTTP transport of the model client: httpx's own, with each connection's stream telling
the current thread's `agent_core.cutoff.Call` which socket it uses (so it can be cut off)."""

from __future__ import annotations

import functools
import ssl
import threading
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from agent_core.cutoff import calls


class _Stream(httpcore.NetworkStream):
    """A connection's stream that tells the current thread's `Call` its socket on each use."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def _note(self) -> None:
        call = calls.get(threading.get_ident())
        if call is not None:
            sock = self._inner.get_extra_info("socket")
            if sock is not None:
                call.using(sock)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._note()
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._note()
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's own synchronous backend, with each stream wrapped in `_Stream`."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One for every transport: each loads the CA bundle, and the model client builds a
    transport per shard of its connections (`agent_core.llm.LLMClient`)."""
    return httpx.create_ssl_context()


def transport(limits: httpx.Limits) -> httpx.HTTPTransport:
    """httpx's transport with connections made through `_Backend`. httpx offers no argument
    for a network backend, so its connection pool is rebuilt with the same settings plus
    ours (tests/agent_core/test_cutoff.py checks a cut still ends a hung request)."""
    made = httpx.HTTPTransport(verify=_ssl_context(), limits=limits)
    made._pool = httpcore.ConnectionPool(
        ssl_context=_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_Backend(),
    )
    return made
