"""aiohttp internals the control server's connection bounds rely on, in one place.

aiohttp has no public hook to choose the connection handler class, to see whether a request
head is half-read, or to hand a body read under our own limits to `Request.read()`. Each
reach below names the private thing it touches; tests/test_shims.py checks all of them
against the installed aiohttp.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler


class HandlerBase(RequestHandler):
    """aiohttp's per-connection handler, with public names for the state we read."""

    __slots__ = ()

    def head_pending(self) -> bool:
        """Bytes of a request head have come and the head is not complete: no request is being
        handled (`_request_in_progress`) and none is parsed and queued (`_messages`)."""
        return not self._messages and not self._request_in_progress

    def closing(self) -> bool:
        """`force_close()` was called (`_force_close`)."""
        return self._force_close

    def open_connections(self) -> int:
        """Connections the server holds now, this one not yet counted (`_manager`)."""
        assert self._manager is not None
        return len(self._manager.connections)

    def event_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop


class ServerBase(web.Server):
    """aiohttp's low-level server, with a public name for what it passes each handler."""

    def handler_kwargs(self) -> dict[str, Any]:
        """The handler settings (`_kwargs`: timeouts, access log, limits) and the loop."""
        return {"loop": self._loop, **self._kwargs}


def server_kwargs(server: web.Server) -> dict[str, Any]:
    """The handler settings an `AppRunner` gave its server (`_kwargs`)."""
    return dict(server._kwargs)


class RunnerBase(web.AppRunner):
    """An `AppRunner` whose server a subclass may replace in `wrap_server` (aiohttp's hook for
    it, `_make_server`, is private)."""

    async def _make_server(self) -> web.Server:
        return self.wrap_server(await super()._make_server())

    def wrap_server(self, base: web.Server) -> web.Server:
        return base


def remember_body(request: web.BaseRequest, data: bytes) -> None:
    """Make `request.read()` (and `json()`, `text()`) return ``data``: the body as read under
    our own limits (`_read_bytes`, aiohttp's cache of the body)."""
    request._read_bytes = data


def forget_body(request: web.BaseRequest) -> None:
    """Drop aiohttp's cache of the body (`_read_bytes`): it is parsed, and a handler that
    lasts a whole chat run must not keep megabytes alive. `read()` gives b"" from now on."""
    request._read_bytes = b""
