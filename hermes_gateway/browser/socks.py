"""A SOCKS5 proxy on loopback that every connection of one browser context goes through: each
target is resolved and checked by the SSRF guard, and the connection goes to the address that
was checked. Redirects, subresources and WebSockets are all new connections, so all are seen."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import struct
from collections.abc import Callable

from tools.errors import ToolError

# pin(host, port) -> the checked address to connect to; raises ToolError when refused
Pin = Callable[[str, int], str]
_NO_AUTH = b"\x05\x00"
_REFUSED, _UNREACHABLE, _BAD_COMMAND = 0x02, 0x04, 0x07
_PIPE_CHUNK = 65536


class GuardedSocks:
    """Serves one context's connections; `refusals` lists what the guard refused, in order."""

    def __init__(self, pin: Pin, connect_timeout_s: float = 15.0) -> None:
        self.pin = pin
        self.connect_timeout_s = connect_timeout_s
        self.refusals: list[str] = []
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen on an ephemeral loopback port and return it."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        self._pipes.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._pipes.add(task)
        try:
            target = await self._handshake(reader, writer)
            if target is not None:
                await self._connect(target, reader, writer)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            # closed with the context: a connection callback's task must not end cancelled
            # (asyncio's streams would log it as an error); it ends here, quietly
            pass
        finally:
            if task is not None:
                self._pipes.discard(task)
            writer.close()

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, int] | None:
        version, count = await reader.readexactly(2)
        await reader.readexactly(count)
        if version != 5:
            return None
        writer.write(_NO_AUTH)
        _, command, _, kind = await reader.readexactly(4)
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        elif kind == 3:
            (size,) = await reader.readexactly(1)
            host = (await reader.readexactly(size)).decode("idna")
        else:
            return None
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if command != 1:  # CONNECT only: no BIND, no UDP (so no QUIC past the guard)
            await _reply(writer, _BAD_COMMAND)
            return None
        return host, port

    async def _connect(
        self,
        target: tuple[str, int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        host, port = target
        loop = asyncio.get_running_loop()
        try:  # DNS is blocking: a thread of the default pool, never this loop
            address = await loop.run_in_executor(None, self.pin, host, port)
        except ToolError as exc:
            self.refusals.append(str(exc))
            await _reply(writer, _REFUSED)
            return
        try:
            upstream = await asyncio.wait_for(
                asyncio.open_connection(address, port), self.connect_timeout_s
            )
        except (OSError, TimeoutError):
            await _reply(writer, _UNREACHABLE)
            return
        up_reader, up_writer = upstream
        await _reply(writer, 0)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()


async def _reply(writer: asyncio.StreamWriter, code: int) -> None:
    writer.write(bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0]))
    with contextlib.suppress(OSError):
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_PIPE_CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.write_eof()
