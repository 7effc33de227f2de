"""A worker thread's call into the event loop: how a tool reaches the gateway's parts (the
store, delivery, the memory archive), with a bound on the wait and tool-facing errors."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

from tools.errors import ToolError


def hop(loop: asyncio.AbstractEventLoop | None, coro: Any, timeout_s: float, late: str) -> Any:
    """Run ``coro`` on ``loop`` and wait for it here (a worker thread, never the loop); a
    wait past ``timeout_s`` cancels it and raises ``late`` as a `ToolError`."""
    if loop is None or loop.is_closed():
        coro.close()
        raise ToolError("the gateway is not running")
    future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result(timeout_s)
    except TimeoutError:
        future.cancel()
        raise ToolError(late) from None
