"""`Link`: one MCP server's connection, kept open by a task on the MCP thread's loop: started,
listed, restarted with backoff when it dies, its stderr in the log at debug. A stdio server
runs inside the tools' walls (`tools.sandbox.prepare`) behind a line cap (`tools/linecap.py`);
an HTTP server's answers are bounded by the transport (`capped_client`)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx2
import mcp_types as types
import structlog
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent_core.backoff import Backoff
from hermes_gateway.config.schema import McpServerConfig
from hermes_gateway.mcp.naming import Listed, check_schema, description, model_name, wanted
from tools import linecap, sandbox
from tools.errors import ToolError

log = structlog.get_logger("hermes.mcp")
State = Literal["idle", "starting", "ready", "restarting", "failing", "stopped"]
FAILING_AFTER = 3  # consecutive failed starts (or deaths) that make a server "failing"
STABLE_S = 30.0  # up this long, a server's next death starts the backoff from the beginning
FLOOD_PER_S = 200  # notifications a second past which the rest of that second is ignored
PING_S = 15.0  # how often an idle connection is checked (a death between calls is seen)
_STDERR_LINE = 2000


@dataclass(frozen=True, slots=True)
class Walls:
    """Where a stdio server runs: the tools' workspace, the environment tool processes get
    (`tool_environment`), and the line cap."""

    workspace: Path
    env: Mapping[str, str]
    max_message_bytes: int


class Link:
    """One configured server; every method runs on the MCP thread's loop."""

    def __init__(
        self, name: str, config: McpServerConfig, walls: Walls, on_change: Callable[[], None]
    ) -> None:
        self.name = name
        self.config = config
        self.walls = walls
        self.on_change = on_change  # its tool list changed (the manager's version goes up)
        self.state: State = "idle"
        self.tools: tuple[Listed, ...] = ()
        self.failures = 0  # in a row
        self.restarts = 0
        self.last_error = ""
        self.listed = asyncio.Event()  # the first listing is done (or failed)
        self._up = asyncio.Event()  # a session is open
        self._session: ClientSession | None = None
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._flood = (0.0, 0)  # (second, notifications in it)
        self._flood_told = False
        self._bad_message_told = False
        self._relist: asyncio.Task[None] | None = None
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None and not self._closing:
            self.state = "starting"
            # a context of its own: not the logging context of the run whose call started it
            self._task = asyncio.get_running_loop().create_task(
                self._keep(), name=f"mcp-{self.name}", context=contextvars.Context()
            )

    async def close(self) -> None:
        self._closing = True
        self.state = "stopped"
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=10)

    async def _keep(self) -> None:
        backoff = Backoff(first=1.0, cap=60.0)
        while not self._closing:
            up = time.monotonic()
            try:
                await self._session_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # whatever the server or transport did: restart
                self.last_error = _describe(exc)
                log.warning("mcp.server_down", server=self.name, error=self.last_error)
            self._session = None
            self._up.clear()
            self.listed.set()
            if self._closing:
                return
            if time.monotonic() - up > STABLE_S:
                backoff.reset()
                self.failures = 0
            self.failures += 1
            self.restarts += 1
            self.state = "failing" if self.failures >= FAILING_AFTER else "restarting"
            await asyncio.sleep(backoff.next())

    async def _session_once(self) -> None:
        cfg = self.config
        self._lost = asyncio.Event()
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=self._on_message)
            )
            await asyncio.wait_for(session.initialize(), cfg.connect_timeout_s)
            await asyncio.wait_for(self._list(session), cfg.connect_timeout_s)
            self._session = session
            self.state = "ready"
            self.listed.set()
            self._up.set()
            log.info("mcp.server_ready", server=self.name, tools=[t.name for t in self.tools])
            while not self._lost.is_set():
                try:
                    await asyncio.wait_for(self._lost.wait(), PING_S)
                except TimeoutError:
                    await asyncio.wait_for(session.send_ping(), cfg.connect_timeout_s)
            raise ConnectionError(self.last_error or "the connection was lost")

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        if self.config.url:
            cap = self.walls.max_message_bytes
            client = capped_client(self.config.headers, cap)
            http = streamable_http_client(
                self.config.url, http_client=client, max_sse_event_size=cap
            )
            async with client, http as (read, write):
                yield read, write
            return
        ready = await asyncio.to_thread(self._prepare)
        errlog = _stderr_to_log(self.name)
        try:
            params = StdioServerParameters(
                command=ready.argv[0],
                args=ready.argv[1:],
                env={**self.walls.env, **self.config.env, **ready.env},
                cwd=self._cwd(),
            )
            async with stdio_client(params, errlog=errlog) as (read, write):
                errlog.close()  # the server holds its own copy
                yield read, write
        finally:
            errlog.close()
            await asyncio.to_thread(ready.release)

    def _cwd(self) -> Path:
        return Path(self.config.cwd) if self.config.cwd else self.walls.workspace

    def _prepare(self) -> sandbox.Prepared:
        cfg = self.config
        capped = [
            os.path.realpath(sys.executable),
            "-I",
            "-S",
            linecap.__file__,
            str(self.walls.max_message_bytes),
            "--",
            cfg.command,
            *cfg.args,
        ]
        limits = sandbox.Limits(
            memory_bytes=cfg.memory_mb * 1024 * 1024 if cfg.memory_mb else None,
            processes=cfg.max_processes,
            open_files=cfg.open_files,
        )
        self.walls.workspace.mkdir(parents=True, exist_ok=True)
        return sandbox.prepare(
            capped, cwd=self._cwd(), workspace=self.walls.workspace, limits=limits
        )

    # -- tools ----------------------------------------------------------------------------

    async def _list(self, session: ClientSession) -> None:
        cfg = self.config
        found: list[Any] = []
        cursor: str | None = None
        for _ in range(20):  # pages; a server that pages forever is cut off
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            found.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(found) >= cfg.max_tools:
                break
        listed: dict[str, Listed] = {}
        for tool in found:
            if not wanted(tool.name, cfg.tools.include, cfg.tools.exclude):
                continue
            name = model_name(self.name, tool.name)
            problem = check_schema(tool.input_schema)
            if problem is None and name in listed:
                problem = f"its name is {name!r} once made safe, like another of its tools"
            if problem is not None:
                log.warning(
                    "mcp.tool_refused", server=self.name, tool=tool.name[:100], reason=problem
                )
                continue
            if len(listed) >= cfg.max_tools:
                log.warning("mcp.too_many_tools", server=self.name, kept=cfg.max_tools)
                break
            text = description(self.name, tool.description)
            listed[name] = Listed(name, tool.name, text, dict(tool.input_schema))
        if tuple(listed.values()) != self.tools:
            self.tools = tuple(listed.values())
            self.on_change()

    async def refresh(self) -> None:
        """List the tools again (`tools/list_changed`, SIGHUP)."""
        session = self._session
        if session is None:
            return
        try:
            await asyncio.wait_for(self._list(session), self.config.connect_timeout_s)
        except Exception as exc:
            log.warning("mcp.list_failed", server=self.name, error=_describe(exc))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            # a line that is not JSON-RPC (cut by the line cap, or garbage): the calls in
            # flight cannot get their answer; the connection starts over
            if not self._bad_message_told:
                self._bad_message_told = True
                log.warning("mcp.bad_message", server=self.name, error=_describe(message)[:300])
            cap = self.walls.max_message_bytes
            self.last_error = f"it sent a message that is not JSON-RPC or is over {cap} bytes"
            self._lost.set()
            return
        second = int(time.monotonic())
        at, count = self._flood
        count = count + 1 if at == second else 1
        self._flood = (second, count)
        if count > FLOOD_PER_S:
            if not self._flood_told:
                self._flood_told = True
                log.warning("mcp.notification_flood", server=self.name, per_s=FLOOD_PER_S)
            return
        if isinstance(message, types.ToolListChangedNotification) and (
            self._relist is None or self._relist.done()
        ):
            self._relist = asyncio.get_running_loop().create_task(self._debounced_refresh())

    async def _debounced_refresh(self) -> None:
        await asyncio.sleep(0.2)
        await self.refresh()

    # -- calls ----------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call ``tool``; the caller bounds the wait (and cancels it)."""
        self.start()  # first use of a lazy server
        if self._lost.is_set():  # seen by an earlier call, not yet by the keeping task
            self._session = None
            self._up.clear()
        if self._session is None and self.state != "failing":
            await self._up.wait()  # (re)starting: the caller's timeout bounds this
        session = self._session
        if session is None:
            why = self.last_error or "starting"
            raise ToolError(f"MCP server {self.name} is not running ({self.state}: {why})")
        try:
            return await session.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                if not self._lost.is_set():  # else the reason is known already (a bad message)
                    self.last_error = "the connection closed during a call"
                self._lost.set()
                self._session = None
                self._up.clear()
                raise ToolError(
                    f"MCP server {self.name} went away during the call ({self.last_error}); "
                    "it is being restarted"
                ) from None
            raise ToolError(f"MCP server {self.name}: {exc.message[:2000]}") from None

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "transport": "http" if self.config.url else "stdio",
            "tools": [t.name for t in self.tools],
            "restarts": self.restarts,
            "last_error": self.last_error or None,
        }


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, cap: int) -> None:
        self._inner, self._cap = inner, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise httpx2.ReadError(f"an answer over {self._cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Answers that are one JSON message are cut off past the cap; event streams are the
    SDK's to bound (one event at most the same cap)."""

    def __init__(self, cap: int) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._cap = cap

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(response.stream, self._cap),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def capped_client(headers: Mapping[str, str], cap: int) -> httpx2.AsyncClient:
    """The HTTP client of one server: its headers, the SDK's timeouts, answers bounded."""
    timeout = httpx2.Timeout(30.0, read=300.0)
    return httpx2.AsyncClient(
        headers=dict(headers), timeout=timeout, transport=_CappedTransport(cap)
    )


def _stderr_to_log(server: str) -> Any:
    """A pipe for the server's stderr; a thread logs each line at debug until it closes."""
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "rb")

    def drain() -> None:
        with reader:
            while line := reader.readline(_STDERR_LINE):  # a line without end stays bounded
                text = line.decode("utf-8", "replace").rstrip()
                log.debug("mcp.server_stderr", server=server, line=text)

    threading.Thread(target=drain, name=f"mcp-{server}-stderr", daemon=True).start()
    return os.fdopen(write_fd, "w")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]
