"""One IMAP connection (aioimaplib), logged in with a folder selected: the few commands the
adapter uses, each bounded by the section's timeout, failures as the gateway's errors."""

from __future__ import annotations

import asyncio
import re
import ssl
from typing import Any

import aioimaplib

from adapters.mail.settings import EmailConfig
from hermes_gateway.platforms import AdapterAuthError, TransientAdapterError

_FETCH_SIZE = re.compile(rb"RFC822\.SIZE (\d+)")
_UIDVALIDITY = re.compile(rb"UIDVALIDITY (\d+)")
_PUSHED = re.compile(rb"^\d+ (EXISTS|RECENT)")


class ImapError(TransientAdapterError):
    """The server answered a command with NO or BAD, or the connection failed."""


class Mailbox:
    """A connection with ``folder`` selected; open with `Mailbox.open`, end with `close`."""

    def __init__(self, client: Any, folder: str, lost: asyncio.Event) -> None:
        self.client = client
        self.folder = folder
        self.uidvalidity = ""
        self.lost = lost  # set by the library once the connection is gone

    @classmethod
    async def open(cls, config: EmailConfig, folder: str) -> Mailbox:
        """Connect, log in and select ``folder``; a refused login is `AdapterAuthError`."""
        lost = asyncio.Event()
        kind = aioimaplib.IMAP4_SSL if config.imap_security == "tls" else aioimaplib.IMAP4
        extra = (
            {"ssl_context": ssl.create_default_context()} if kind is not aioimaplib.IMAP4 else {}
        )
        try:
            client = kind(
                config.imap_host,
                config.imap_port,
                timeout=config.timeout_s,
                conn_lost_cb=lambda _exc: lost.set(),
                **extra,
            )
            await client.wait_hello_from_server()
            login = await client.login(config.login, config.password)
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise ImapError(f"imap: cannot connect: {exc!r}") from exc
        if login.result != "OK":
            await _quietly_close(client)
            raise AdapterAuthError(f"imap: login refused: {_text(login.lines)}")
        box = cls(client, folder, lost)
        box.uidvalidity = await box._select(folder)
        return box

    async def select(self, folder: str) -> None:
        self.uidvalidity = await self._select(folder)
        self.folder = folder

    async def _select(self, folder: str) -> str:
        response = await self._run(self.client.select(folder), f"SELECT {folder}")
        found = _UIDVALIDITY.search(b" ".join(_lines(response.lines)))
        return found.group(1).decode() if found else ""

    async def _run(self, call: Any, what: str) -> Any:
        try:
            response = await self._unless_lost(call)
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise ImapError(f"imap: {what}: {exc!r}") from exc
        if response.result != "OK":
            raise ImapError(f"imap: {what}: {response.result} {_text(response.lines)}")
        return response

    def can(self, capability: str) -> bool:
        return capability in (self.client.protocol.capabilities or ())

    async def search(self, *criteria: str) -> list[int]:
        response = await self._run(self.client.uid_search(*criteria), "UID SEARCH")
        line = next((x for x in _lines(response.lines) if x[:1].isdigit()), b"")
        return sorted(int(x) for x in line.split() if x.isdigit())

    async def find(self, message_id: str) -> list[int]:
        """The mails whose Message-ID is ``message_id`` (a sender's: quoted safely)."""
        quoted = message_id.replace("\\", "\\\\").replace('"', '\\"')
        return await self.search("HEADER", "Message-ID", f'"<{quoted}>"')

    async def size(self, uid: int) -> int:
        response = await self._run(self.client.uid("fetch", str(uid), "(RFC822.SIZE)"), "FETCH")
        found = _FETCH_SIZE.search(b" ".join(_lines(response.lines)))
        return int(found.group(1)) if found else 0

    async def fetch(self, uid: int) -> bytes | None:
        """The whole mail (not marked read: BODY.PEEK); None once it is gone."""
        response = await self._run(self.client.uid("fetch", str(uid), "(BODY.PEEK[])"), "FETCH")
        literal = next((x for x in response.lines if isinstance(x, bytearray)), None)
        return bytes(literal) if literal is not None else None

    async def header(self, uid: int) -> bytes | None:
        """The mail's header block only."""
        call = self.client.uid("fetch", str(uid), "(BODY.PEEK[HEADER])")
        response = await self._run(call, "FETCH")
        literal = next((x for x in response.lines if isinstance(x, bytearray)), None)
        return bytes(literal) if literal is not None else None

    async def mark_seen(self, uid: int) -> None:
        await self._run(self.client.uid("store", str(uid), "+FLAGS.SILENT", r"(\Seen)"), "STORE")

    async def move(self, uid: int, folder: str) -> None:
        """Into ``folder`` (MOVE, or COPY and delete where the server lacks MOVE), read."""
        await self.mark_seen(uid)
        if self.can("MOVE"):
            await self._run(self.client.uid("move", str(uid), folder), "MOVE")
            return
        await self._run(self.client.uid("copy", str(uid), folder), "COPY")
        await self._run(self.client.uid("store", str(uid), "+FLAGS.SILENT", r"(\Deleted)"), "STORE")
        await self._run(self.client.expunge(), "EXPUNGE")

    async def wait(self, timeout: float, idle: bool) -> None:
        """Until the server says a mail arrived (IDLE) or ``timeout`` passed; without IDLE
        (unsupported, or turned off), a NOOP after the pause keeps the connection checked.
        A connection lost meanwhile raises `ImapError` at once."""
        if not (idle and self.can("IDLE")):
            await self._unless_lost(asyncio.sleep(timeout))
            await self._run(self.client.noop(), "NOOP")
            return
        task = await self._run_idle(timeout)
        try:
            while True:
                pushed = await self._unless_lost(self.client.wait_server_push(timeout + 5))
                if pushed == aioimaplib.STOP_WAIT_SERVER_PUSH:
                    break
                if any(_PUSHED.match(x) for x in _lines(pushed)):
                    break
        except TimeoutError:
            pass
        finally:
            if self.lost.is_set():
                task.cancel()
            else:
                if self.client.has_pending_idle():
                    self.client.idle_done()
                await asyncio.wait_for(task, self.client.timeout)

    async def _unless_lost(self, awaitable: Any) -> Any:
        """``awaitable``'s result, or `ImapError` as soon as the connection is lost (the
        library leaves a command in flight waiting forever then: IDLE's start has no
        timeout)."""
        work = asyncio.ensure_future(awaitable)
        gone = asyncio.ensure_future(self.lost.wait())
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not work.done():
                work.cancel()
        if work.cancelled():
            raise ImapError("imap: the connection was lost")
        return work.result()

    async def _run_idle(self, timeout: float) -> Any:
        try:
            return await self._unless_lost(self.client.idle_start(timeout=timeout))
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise ImapError(f"imap: IDLE: {exc!r}") from exc

    async def close(self) -> None:
        await _quietly_close(self.client)


async def _quietly_close(client: Any) -> None:
    try:
        await asyncio.wait_for(client.logout(), 5)
    except (OSError, TimeoutError, aioimaplib.AioImapException):
        pass


def _lines(lines: Any) -> list[bytes]:
    return [bytes(x) for x in lines if isinstance(x, bytes | bytearray)]


def _text(lines: Any) -> str:
    return b" ".join(_lines(lines)).decode(errors="replace")[:200]
