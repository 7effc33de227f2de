"""python-telegram-bot's HTTP transport on aiohttp, the gateway's own HTTP stack.

PTB's default (httpx over httpcore and anyio) costs about 1 ms of CPU per Bot API call on this
hardware; aiohttp, already loaded for the control server, costs a quarter of that. PTB is
built for this seam: any `BaseRequest` can carry its calls.
"""

from __future__ import annotations

import json
from typing import Any, cast
from urllib.parse import urlencode

import aiohttp

from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

# PTB's "not given" marker class, reached through its public `DEFAULT_NONE`
_NOT_GIVEN = type(BaseRequest.DEFAULT_NONE)


class AiohttpRequest(BaseRequest):
    """A keep-alive aiohttp session for Bot API calls, with PTB's timeout semantics."""

    def __init__(
        self,
        *,
        connection_pool_size: int = 8,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        self._pool_size = connection_pool_size
        self._read = read_timeout
        self._write = write_timeout
        self._connect = connect_timeout
        self._pool = pool_timeout
        self._media_write = media_write_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        return self._read

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(
                connector=connector, headers={"User-Agent": self.USER_AGENT}
            )

    async def shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: object = BaseRequest.DEFAULT_NONE,
        write_timeout: object = BaseRequest.DEFAULT_NONE,
        connect_timeout: object = BaseRequest.DEFAULT_NONE,
        pool_timeout: object = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        if self._session is None or self._session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data.multipart_data if request_data else None
        read = _given(read_timeout, self._read)
        connect = _given(connect_timeout, self._connect)
        write = _given(write_timeout, self._write)
        if files and isinstance(write_timeout, _NOT_GIVEN):
            write = self._media_write
        # aiohttp has no separate write or pool timeout: bound the whole exchange by their sum
        parts = [t for t in (read, connect, write) if t is not None]
        total = sum(parts) if len(parts) == 3 else None
        timeout = aiohttp.ClientTimeout(total=total, sock_connect=connect, sock_read=read)
        data, headers = _body(request_data)
        try:
            async with self._session.request(
                method, url, data=data, headers=headers, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc

    async def call(
        self, url: str, fields: dict[str, Any], read_timeout: float | None = None
    ) -> Any:
        """POST one Bot API method with ``fields`` and return its ``result`` as parsed JSON,
        raising PTB's errors like any other call. For the calls whose answer the gateway reads
        itself: sends and edits (PTB would build a `Message`, and the message it quotes, for
        an id: ~0.4 ms of CPU per reply) and getUpdates (each update is parsed once, by
        `Poller`)."""
        data = cast(RequestData, Fields(fields))
        if read_timeout is None:
            return await self.post(url, request_data=data)
        return await self.post(url, request_data=data, read_timeout=read_timeout)


class Fields:
    """What `do_request` reads of a `RequestData` (a final class), for `call`'s fields:
    strings as they are, anything else as JSON, like PTB's own encoding."""

    multipart_data = None

    def __init__(self, parameters: dict[str, Any]) -> None:
        self.parameters = {k: v for k, v in parameters.items() if v is not None}

    @property
    def json_parameters(self) -> dict[str, str]:
        return {
            k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in self.parameters.items()
        }


def _given(timeout: object, default: float | None) -> float | None:
    """The timeout PTB passed, or ours where it passed its "not given" marker."""
    if isinstance(timeout, _NOT_GIVEN):
        return default
    return None if timeout is None else float(cast(float, timeout))


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _body(request_data: RequestData | None) -> tuple[Any, dict[str, str] | None]:
    """Form fields as PTB encodes them (JSON for non-strings), multipart when files go along.
    Plain fields are url-encoded here: aiohttp's `FormData` for a dict costs more than the
    encoding itself."""
    if request_data is None:
        return None, None
    fields = request_data.json_parameters
    files = request_data.multipart_data
    if not files:
        return (urlencode(fields).encode(), FORM) if fields else (None, None)
    form = aiohttp.FormData()
    for name, value in fields.items():
        form.add_field(name, value)
    for name, part in files.items():
        if isinstance(part, tuple):
            filename, content, mimetype = part
            form.add_field(name, content, filename=filename, content_type=mimetype)
        else:
            form.add_field(name, part)
    return form, None


__all__ = ["AiohttpRequest"]
