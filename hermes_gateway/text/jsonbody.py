"""The one JSON parser for request bodies on every route: nesting and size are checked on the
bytes before `json.loads` sees them, and anything refused is a `RequestError` 4xx (one log line
from the control server), never a `RecursionError` and a 500."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from contextvars import ContextVar
from itertools import accumulate
from typing import Any

from aiohttp import web

from hermes_gateway.errors import RequestError

MAX_DEPTH = 64  # no request of ours nests past a dozen levels; Python's own limit is ~1000
# set by the control server around a handler: drops the body's bytes and gives back its
# share of the body budget (`ControlServer._with_body`)
body_done: ContextVar[Callable[[], None] | None] = ContextVar("body_done", default=None)
# a JSON string, escapes included: its brackets are text, not nesting (unrolled: linear time)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")  # +1 and -1 as signed bytes
OFF_LOOP_BYTES = 64 * 1024  # a body this large is parsed in a thread: the loop keeps going


def nesting_over(data: bytes, max_depth: int = MAX_DEPTH) -> bool:
    """True when ``data`` nests arrays and objects more than ``max_depth`` deep."""
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return False  # cannot nest deeper than it opens: the common case, two memchr passes
    steps = _STRING.sub(b"", data).translate(_STEPS, _NOT_BRACKETS)
    # the running sum of +1 per opening and -1 per closing bracket is the depth at each one;
    # `accumulate` and `max` run in C (0.1-0.2 s for 2 MB of nothing but brackets)
    return max(accumulate(memoryview(steps).cast("b")), default=0) > max_depth


def loads(data: bytes | str, *, max_bytes: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """``data`` parsed, or a `RequestError`: 413 past ``max_bytes``, 400 when nested past
    ``max_depth`` or not JSON (bad syntax or UTF-8, an integer past Python's digit limit)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if max_bytes is not None and len(raw) > max_bytes:
        raise RequestError(413, f"the request body is over {max_bytes} bytes", "body_too_large")
    if nesting_over(raw, max_depth):
        raise RequestError(
            400, f"the request body nests deeper than {max_depth} levels", "invalid_json"
        )
    try:
        return json.loads(raw)
    except RecursionError:  # not reached after the check above; kept as the last word
        raise RequestError(400, "the request body is nested too deeply", "invalid_json") from None
    except ValueError:
        raise RequestError(400, "the request body is not valid JSON", "invalid_json") from None


async def read_json(request: web.Request) -> Any:
    """The request's body parsed by `loads`; the raw bytes are dropped from the request and
    its share of the body budget given back at once, so a long handler (a chat run) does not
    hold them. Read a body once: after this, `request.read()` is empty."""
    try:
        data = await request.read()
        if len(data) > OFF_LOOP_BYTES:
            return await asyncio.to_thread(loads, data)
        return loads(data)
    finally:
        if (done := body_done.get()) is not None:
            done()


async def read_object(request: web.Request) -> dict[str, Any]:
    """`read_json`, which must give a JSON object."""
    body = await read_json(request)
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return body
