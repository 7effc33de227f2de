"""Files an answer sends on the local API (`send_file`): each is lent under an unguessable token,
bound to its session, that the session's client fetches from ``GET /v1/files/<token>`` on the
control port (`hermes chat` saves it). The file is read when it is fetched; tokens live in this
process, for `TTL_S`."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, replace

from aiohttp import web

from adapters.api import UPLOAD_BYTES
from hermes_gateway.platforms import OutboundFile, OutboundMessage, read_outbound

FILES_PATH = "/v1/files/{token}"
TTL_S = 3600.0  # how long a client may take to fetch a file of an answer
_MAX_LENT = 4096


@dataclass(frozen=True, slots=True)
class Lent:
    session: str  # the API session (``user``) the answer was for
    file: OutboundFile
    at: float


class FileShelf:
    """The files lent to clients, by token."""

    def __init__(self) -> None:
        self._lent: dict[str, Lent] = {}

    def lend(self, message: OutboundMessage) -> OutboundMessage:
        """``message`` with each file's path replaced by the URL path its client fetches."""
        now = time.monotonic()
        for token in [t for t, lent in self._lent.items() if now - lent.at > TTL_S]:
            del self._lent[token]
        links = []
        for file in message.files:
            token = secrets.token_urlsafe(24)
            self._lent[token] = Lent(message.chat_id, file, now)
            links.append(replace(file, path=FILES_PATH.format(token=token)))
        while len(self._lent) > _MAX_LENT:  # the oldest go first
            del self._lent[next(iter(self._lent))]
        return replace(message, files=tuple(links))

    async def serve(self, request: web.Request) -> web.StreamResponse:
        """The file, to a client naming its session (``user`` or ``X-Hermes-Session``) when
        the answer was for a named session; 404 for any other token or session."""
        lent = self._lent.get(request.match_info["token"])
        asked = request.query.get("user") or request.headers.get("X-Hermes-Session", "")
        if lent is None or time.monotonic() - lent.at > TTL_S or asked != lent.session:
            raise web.HTTPNotFound(text="no such file (it expired, or is another session's)")
        got = await asyncio.to_thread(read_outbound, lent.file, UPLOAD_BYTES)
        if isinstance(got, str):
            raise web.HTTPGone(text=f"{lent.file.name} cannot be sent: {got}")
        disposition = f'attachment; filename="{_quoted(lent.file.name)}"'
        return web.Response(
            body=got,
            content_type="application/octet-stream",
            headers={"Content-Disposition": disposition},
        )


def _quoted(name: str) -> str:
    return "".join(c if c.isprintable() and c not in '"\\' else "_" for c in name)
