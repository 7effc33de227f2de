"""`McpManager`: the configured MCP servers, connected from a thread of their own (its own
event loop: a server's flood or a large answer is parsed there, never on the gateway's loop),
the tools each session may use, and the synchronous call a worker thread makes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import structlog

from hermes_gateway.config.schema import McpConfig, McpServerConfig
from hermes_gateway.mcp.link import Link, Walls
from hermes_gateway.mcp.naming import result_text
from hermes_gateway.mcp.tool import LiveTools, McpTool
from tools.errors import ToolError
from tools.registry import Tool, ToolRegistry

log = structlog.get_logger("hermes.mcp")
FIRST_LIST_WAIT_S = 15.0  # a turn waits this long at most for a lazy server's first listing
_POLL_S = 0.05


class McpManager:
    """Owns the MCP thread and one `Link` per enabled server."""

    def __init__(self, config: McpConfig, walls: Walls) -> None:
        self.config = config
        self.walls = walls
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp", daemon=True)
        self._version = 0
        self._lock = threading.Lock()
        self.links = {
            name: Link(name, server, walls, self._changed)
            for name, server in config.active().items()
        }
        self._tools: dict[str, tuple[McpTool, ...]] = {}  # by server, rebuilt on a change

    # -- lifecycle (gateway loop) ---------------------------------------------------------

    async def start(self) -> None:
        """Start the thread and the eager servers; nothing waits for them."""
        self._thread.start()
        for link in self.links.values():
            if link.config.eager:
                self._loop.call_soon_threadsafe(link.start)

    async def stop(self) -> None:
        if self._thread.is_alive():
            closing = [link.close() for link in self.links.values()]
            future = asyncio.run_coroutine_threadsafe(_all(closing), self._loop)
            await asyncio.wrap_future(future)
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join, 10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    def refresh(self) -> None:
        """SIGHUP: list every running server's tools again."""
        if self._thread.is_alive():
            for link in self.links.values():
                asyncio.run_coroutine_threadsafe(link.refresh(), self._loop)

    # -- tools (worker threads) -----------------------------------------------------------

    def live(self, base: ToolRegistry, session_key: str) -> ToolRegistry:
        """``base`` with the MCP tools ``session_key`` may use (none: ``base`` itself)."""
        servers = [name for name, link in self.links.items() if _allowed(link.config, session_key)]
        if not servers:
            return base
        return LiveTools(base, lambda: self._current(servers))

    def _current(self, servers: Sequence[str]) -> tuple[int, Sequence[Tool]]:
        self._first_use(servers)
        with self._lock:
            version = self._version
            tools = [tool for name in servers for tool in self._tools.get(name, ())]
        return version, tools

    def wait_listed(self, server: str) -> None:
        """Start ``server`` if it waits for its first use, and wait for its first listing
        (`hermes mcp test`; a worker thread)."""
        self._first_use([server], self.links[server].config.connect_timeout_s * 2 + 5)

    def _first_use(self, servers: Sequence[str], within_s: float = FIRST_LIST_WAIT_S) -> None:
        """Start the lazy servers among ``servers`` and, off the event loop, wait a moment
        for their first listing (a turn that began before it would not see their tools)."""
        waits: list[concurrent.futures.Future[Any]] = []
        for name in servers:
            link = self.links[name]
            if link.state == "idle" and self._thread.is_alive():
                self._loop.call_soon_threadsafe(link.start)
            if not link.listed.is_set() and self._thread.is_alive():
                waits.append(asyncio.run_coroutine_threadsafe(link.listed.wait(), self._loop))
        if waits and not _on_event_loop():
            concurrent.futures.wait(waits, timeout=within_s)
        for wait in waits:
            wait.cancel()

    def _changed(self) -> None:
        """A server's tool list changed (on the MCP loop): the tools are made anew."""
        made = {
            name: tuple(
                McpTool(name, listed, self.call, _asks(link.config, listed.tool))
                for listed in link.tools
            )
            for name, link in self.links.items()
        }
        with self._lock:
            self._tools = made
            self._version += 1

    def call(
        self, server: str, tool: str, arguments: dict[str, Any], should_stop: Callable[[], bool]
    ) -> str:
        """Call ``tool`` of ``server`` and wait here (a worker thread) for its answer, its
        timeout, or the run's stop (`/stop`, an interrupt, the run's deadline)."""
        link = self.links[server]
        timeout = link.config.timeout_s
        future = self._submit(link.call(tool, arguments))
        deadline = time.monotonic() + timeout
        while True:
            try:
                result = future.result(_POLL_S)
                break
            except concurrent.futures.TimeoutError:
                if should_stop():
                    future.cancel()
                    raise ToolError("stopped: the run was interrupted") from None
                if time.monotonic() > deadline:
                    future.cancel()
                    raise ToolError(
                        f"MCP server {server} did not answer within {timeout:g} s"
                    ) from None
            except concurrent.futures.CancelledError:
                raise ToolError(f"MCP server {server} stopped during the call") from None
        text = result_text(result.content, result.structured_content)
        if result.is_error:
            raise ToolError(f"{tool} failed: {text[:4000]}")
        return text

    def _submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        if not self._thread.is_alive():
            coro.close()
            raise ToolError("MCP servers are not running (the gateway is stopping)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # -- what operators see ---------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {name: link.status() for name, link in self.links.items()}

    def problems(self) -> list[str]:
        """For /readyz's reasons: the servers that keep failing."""
        return [
            f"mcp {name}: failing ({link.last_error or 'it keeps stopping'}); its tools answer "
            "with an error, the other tools work"
            for name, link in self.links.items()
            if link.state == "failing"
        ]


def _allowed(server: McpServerConfig, session_key: str) -> bool:
    platform = session_key.split(":", 1)[0]
    if server.platforms and platform not in server.platforms:
        return False
    return not server.chats or any(
        session_key == chat or session_key.startswith(chat + ":") for chat in server.chats
    )


def _asks(server: McpServerConfig, tool: str) -> bool:
    if server.approval == "always":
        return True
    if server.approval == "off":
        return False
    return tool in server.approval


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _all(coros: list[Coroutine[Any, Any, None]]) -> None:
    await asyncio.gather(*coros, return_exceptions=True)
