"""The one attachment downloader, for every platform: only from the platform's own file hosts,
size-capped while streaming, written off the loop into ``<home>/media`` under a safe name, and
only when a tool asks for the file. A platform gives only its wire primitive: the file's URL
(Discord's CDN, Slack's ``url_private``) or how to get one (Telegram's getFile)."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import structlog
import yarl

from hermes_gateway.errors import (
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from hermes_gateway.events import Attachment
from hermes_gateway.platforms.retry import retry_after_s, with_retry

log = structlog.get_logger("hermes.adapters.media")
T = TypeVar("T")
# the platform's own step that gives an attachment its download URL (and the size the platform
# reports now), for a platform whose messages carry only a file id
Locate = Callable[[Attachment], Awaitable[Attachment]]
# per request: bytes must keep coming; the whole download (retries included) has `deadline_s`
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=20)
MAX_RETRY_AFTER_S = 10.0  # a tool is waiting: a longer 429 fails the call instead
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class Origin:
    """Scheme, host and port: what a URL must match exactly to be fetched."""

    scheme: str
    host: str
    port: int | None

    @classmethod
    def of(cls, url: str | yarl.URL) -> Origin | None:
        try:
            parsed = url if isinstance(url, yarl.URL) else yarl.URL(url)
        except (ValueError, TypeError):
            return None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            return None
        return cls(parsed.scheme, parsed.host, parsed.port)


def origins(*urls: str) -> frozenset[Origin]:
    """The origins of ``urls``; unparsable or non-http ones are left out."""
    return frozenset(o for o in map(Origin.of, urls) if o is not None)


def allowed_url(url: str, allowed: Iterable[Origin]) -> yarl.URL:
    """``url`` parsed, if it is on one of the ``allowed`` origins; else `PermanentAdapterError`.

    The URL comes from a user's message (a payload field), so it must never make the gateway
    fetch an arbitrary host; credentials in it (``https://cdn@evil/``) are refused outright."""
    try:
        parsed = yarl.URL(url)
    except (ValueError, TypeError):
        parsed = yarl.URL()
    origin = Origin.of(parsed) if parsed.is_absolute() else None
    if origin is None or parsed.user is not None or parsed.password is not None:
        raise PermanentAdapterError("the attachment has no usable download URL")
    if origin not in set(allowed):
        host = f"{origin.host}:{parsed.explicit_port}" if parsed.explicit_port else origin.host
        raise PermanentAdapterError(
            f"refusing to download from {host}: not one of the platform's file hosts"
        )
    return parsed


class LinkRefusedError(PermanentAdapterError):
    """The file host answered 401, 403, 404 or 410: the link may have expired (Discord's signed
    CDN links do after ~24 h), so the caller may renew it once; retrying it as is cannot help."""


def safe_name(file_id: str, name: str) -> str:
    """A file name that stays inside its folder: ``<file_id>-<name>``, unsafe runs as ``_``."""
    fid = _UNSAFE.sub("_", file_id).lstrip("._")[:40]
    base = _UNSAFE.sub("_", name).lstrip(".")[-100:].lstrip(".") or "file"
    return f"{fid}-{base}" if fid else base


class Downloader:
    """Fetches one platform's attachments on its own aiohttp session (opened on first use).

    ``refuse_html``: a ``text/html`` answer for a file that is not HTML is the platform's
    sign-in page (Slack answers an unauthorized ``url_private`` with one, status 200)."""

    attempts = 3
    base_delay = 0.5
    chunk_size = 64 * 1024
    # a tool waits for the file at most 30 s (`tool_host.HOP_TIMEOUT_S`): fail clearly before
    deadline_s = 25.0

    def __init__(
        self,
        platform: str,
        folder: Path,
        cap: int,
        allowed: Iterable[Origin],
        *,
        refuse_html: bool = False,
        denied_hint: str = "",
    ) -> None:
        self.platform = platform
        self.folder = folder
        self.cap = cap
        self.allowed = frozenset(allowed)
        self.refuse_html = refuse_html
        self.denied_hint = denied_hint
        self._session: aiohttp.ClientSession | None = None
        self._closed = asyncio.Event()

    def set_cap(self, cap: int) -> None:
        """The size limit for the downloads from now on (a reload may change it)."""
        self.cap = cap

    async def fetch(
        self,
        attachment: Attachment,
        headers: Mapping[str, str] | None = None,
        *,
        locate: Locate | None = None,
    ) -> Path:
        """The attachment's file under `folder`; `PermanentAdapterError` for a foreign host or a
        file over `cap`, `TransientAdapterError` when the network fails after the retries.
        ``headers`` (a bearer token) go only to an allowed host, never into a log line.
        ``locate`` gives the attachment its URL first (within the same deadline), for a
        platform whose messages carry only a file id."""
        label = attachment.name or attachment.file_id or "the file"
        try:
            path = await self._fetch(attachment, label, headers or {}, locate)
        except Exception as exc:
            log.warning("media.download_failed", platform=self.platform, file=label, error=str(exc))
            raise
        return path

    async def cached(self, attachment: Attachment) -> Path | None:
        """The file if an earlier download finished it (only complete files get its name)."""
        final = self.folder / safe_name(attachment.file_id, attachment.name)
        return final if await asyncio.to_thread(final.is_file) else None

    async def _fetch(
        self,
        attachment: Attachment,
        label: str,
        headers: Mapping[str, str],
        locate: Locate | None,
    ) -> Path:
        if locate is None:
            allowed_url(attachment.url, self.allowed)  # a foreign host: refused before all else
        self._check_size(label, attachment.size)  # as announced: refused before any request
        try:
            async with asyncio.timeout(self.deadline_s):
                if locate is not None:
                    attachment = await locate(attachment)
                    self._check_size(label, attachment.size)
                return await self._download(attachment, label, headers)
        except TimeoutError:
            raise TransientAdapterError(
                f"{self.platform}: downloading {label} took longer than {self.deadline_s:g} s"
            ) from None

    async def _download(
        self, attachment: Attachment, label: str, headers: Mapping[str, str]
    ) -> Path:
        url = allowed_url(attachment.url, self.allowed)
        final = self.folder / safe_name(attachment.file_id, attachment.name)
        if await self.cached(attachment):
            return final
        path = await with_retry(
            lambda: self._fetch_once(url, final, attachment, label, headers),
            what=f"{self.platform}.download",
            attempts=self.attempts,
            base_delay=self.base_delay,
            max_retry_after=MAX_RETRY_AFTER_S,
            stop=self._closed,
        )
        log.info("media.downloaded", platform=self.platform, file=label, host=url.host)
        return path

    async def _fetch_once(
        self,
        url: yarl.URL,
        final: Path,
        attachment: Attachment,
        label: str,
        headers: Mapping[str, str],
    ) -> Path:
        spool = _Spool(final)
        try:
            # redirects are not followed: the target would escape the host check (and receive
            # the bearer token)
            async with self._open().get(
                url, headers=headers, allow_redirects=False, timeout=TIMEOUT
            ) as resp:
                self._check_response(resp, attachment, label)
                async for chunk in resp.content.iter_chunked(self.chunk_size):
                    await spool.add(chunk)
                    # the announced sizes may lie: what arrives counts
                    self._check_size(label, spool.size, announced=attachment.size)
            return await spool.commit()
        except (aiohttp.ClientError, OSError) as exc:  # OSError covers TimeoutError
            await spool.discard()
            reason = _without_path(str(exc) or type(exc).__name__, url)
            raise TransientAdapterError(
                f"{self.platform}: downloading {label} failed: {reason}"
            ) from exc
        except BaseException:
            await spool.discard()
            raise

    def _check_response(
        self, resp: aiohttp.ClientResponse, attachment: Attachment, label: str
    ) -> None:
        status, where = resp.status, f"{self.platform} answered HTTP {resp.status} for {label}"
        if status == 200:
            if resp.content_length is not None:
                self._check_size(label, resp.content_length)
            html = resp.content_type == "text/html" and attachment.mime_type != "text/html"
            if self.refuse_html and html:
                raise PermanentAdapterError(f"{where} with a sign-in page{self.denied_hint}")
            return
        if status == 429:
            raise RateLimitedError(where, retry_after_s(resp.headers.get("Retry-After")))
        if status >= 500:
            raise TransientAdapterError(where)
        if 300 <= status < 400:
            raise PermanentAdapterError(f"{where} (a redirect, not followed)")
        if status in (401, 403):
            raise LinkRefusedError(f"{where}{self.denied_hint}")
        if status in (404, 410):
            raise LinkRefusedError(where)
        raise PermanentAdapterError(where)

    def _check_size(self, label: str, size: int, *, announced: int | None = None) -> None:
        if size <= self.cap:
            return
        if announced is None:
            raise PermanentAdapterError(f"{label} is {size} bytes (the cap is {self.cap})")
        lied = f", though {announced} were announced" if announced else ""
        raise PermanentAdapterError(
            f"{label} is over the cap of {self.cap} bytes (stopped after {size} bytes{lied})"
        )

    def _open(self) -> aiohttp.ClientSession:
        if self._closed.is_set():
            raise TransientAdapterError(f"{self.platform}: the adapter is shutting down")
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=TIMEOUT, trust_env=False)
        return self._session

    async def aclose(self) -> None:
        self._closed.set()
        if self._session is not None:
            await self._session.close()
            self._session = None


def _without_path(reason: str, url: yarl.URL) -> str:
    """An error's text without the URL's path, which may hold a credential (Telegram puts the
    bot token there) and must not reach a log line or the model."""
    for secret in (str(url), url.raw_path, url.path):
        if len(secret) > 1:
            reason = reason.replace(secret, "/...")
    return reason


class _Spool:
    """One download on its way to disk: buffered, appended to a hidden part file off the loop
    a megabyte at a time, renamed to its final name only once complete."""

    flush_at = 1024 * 1024

    def __init__(self, final: Path) -> None:
        self.final = final
        self.part = final.with_name(f".{final.name}.{secrets.token_hex(4)}.part")
        self.size = 0
        self._buffer = bytearray()

    async def add(self, chunk: bytes) -> None:
        self._buffer += chunk
        self.size += len(chunk)
        if len(self._buffer) >= self.flush_at:
            await self._flush()

    async def _flush(self) -> None:
        data, self._buffer = bytes(self._buffer), bytearray()
        await _disk(_append, self.part, data)

    async def commit(self) -> Path:
        await self._flush()
        await _disk(os.replace, self.part, self.final)
        return self.final

    async def discard(self) -> None:
        self._buffer.clear()
        try:
            await _disk(_unlink, self.part)
        except PermanentAdapterError as exc:  # a leftover hidden part file is harmless
            log.warning("media.cleanup_failed", error=str(exc))


async def _disk(fn: Callable[..., T], *args: Any) -> T:
    """``fn`` on a worker thread; a cancelled download still waits for it, so its cleanup never
    races a write. Disk errors are not network errors: not retried."""
    future = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise
    except OSError as exc:
        raise PermanentAdapterError(f"could not write the file: {exc}") from exc


def _append(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        fh.write(data)


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)
