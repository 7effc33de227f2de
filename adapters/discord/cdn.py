"""Discord's signed CDN links expire (~24 h, the ``ex`` query parameter): an attachment of a
message replayed after a long outage carries a dead link, so it is renewed once through
``POST /attachments/refresh-urls`` (on discord.py's HTTP client) before or after the CDN refuses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import structlog
import yarl

import discord
from hermes_gateway.platforms import (
    Attachment,
    Downloader,
    LinkRefusedError,
    PermanentAdapterError,
    TransientAdapterError,
    allowed_url,
)

log = structlog.get_logger("hermes.adapters.discord")
# a link this close to its expiry may die mid-download: renew it first
EXPIRY_MARGIN_S = 60.0
# discord.py sleeps through 429s on its own: bound the whole call, a tool is waiting
RENEW_TIMEOUT_S = 10.0


def expires_at(url: str) -> float | None:
    """The unix time a signed CDN link stops working (its hex ``ex``), or None if unsigned."""
    try:
        return float(int(yarl.URL(url).query.get("ex", ""), 16))
    except (ValueError, TypeError):
        return None


def expired(url: str, now: float | None = None) -> bool:
    expiry = expires_at(url)
    return expiry is not None and expiry <= (time.time() if now is None else now) + EXPIRY_MARGIN_S


class CdnLinks:
    """Downloads Discord attachments, renewing an expired or refused link once.

    The renewal needs only the URL (which the persisted event keeps), not the message, and no
    permission beyond having seen the message; the renewed URL goes through the same origin
    check, size cap and no-redirect rule as the first."""

    def __init__(self, downloader: Downloader, rest: Callable[[], discord.Client]) -> None:
        self.downloader = downloader
        self.rest = rest  # raises TransientAdapterError while the client is (re)connecting

    async def fetch(self, attachment: Attachment) -> Path:
        allowed_url(attachment.url, self.downloader.allowed)  # a foreign host: not even renewed
        cached = await self.downloader.cached(attachment)
        if cached is not None:
            return cached
        label = attachment.name or attachment.file_id or "the file"
        # one deadline for fetch, renewal and refetch: the tool gives up after 30 s
        deadline = self.downloader.deadline_s
        try:
            async with asyncio.timeout(deadline):
                return await self._fetch(attachment, label)
        except TimeoutError:
            raise TransientAdapterError(
                f"discord: downloading {label} took longer than {deadline:g} s"
            ) from None

    async def _fetch(self, attachment: Attachment, label: str) -> Path:
        if expired(attachment.url):  # the CDN would only answer 404: do not ask it
            return await self._fetch_renewed(attachment, label, "expired")
        try:
            return await self.downloader.fetch(attachment)
        except LinkRefusedError:
            return await self._fetch_renewed(attachment, label, "refused")

    async def _fetch_renewed(self, attachment: Attachment, label: str, why: str) -> Path:
        fresh = await self.renew(attachment.url, label)
        log.info("discord.link_renewed", file=label, why=why)
        try:
            return await self.downloader.fetch(replace(attachment, url=fresh))
        except LinkRefusedError as exc:
            raise PermanentAdapterError(f"{exc} (a link Discord had just renewed)") from None

    async def renew(self, url: str, label: str) -> str:
        """A fresh signed URL for ``url``; `PermanentAdapterError` if Discord gives none (the
        message or file was deleted), `TransientAdapterError` if asking failed."""
        failed = f"discord: could not renew the expired link of {label}"
        try:
            answer = await self._ask(url)
        except TimeoutError:
            raise self._failed(TransientAdapterError(f"{failed}: no answer in time")) from None
        except discord.HTTPException as exc:
            kind = TransientAdapterError if exc.status >= 500 else PermanentAdapterError
            detail = f"Discord answered HTTP {exc.status}" + (f" ({exc.text})" if exc.text else "")
            raise self._failed(kind(f"{failed}: {detail}")) from None
        except (aiohttp.ClientError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise self._failed(TransientAdapterError(f"{failed}: {reason}")) from None
        fresh = _refreshed(answer, url)
        if fresh is None or fresh == url or expired(fresh):
            gone = f"{failed}: Discord has no newer one (was the message deleted?)"
            raise self._failed(PermanentAdapterError(gone))
        return fresh

    async def _ask(self, url: str) -> Any:
        client = self.rest()
        # discord.py 2.7 has no helper for this endpoint; its Route brings auth and rate limits
        route = discord.http.Route("POST", "/attachments/refresh-urls")
        async with asyncio.timeout(RENEW_TIMEOUT_S):
            return await client.http.request(route, json={"attachment_urls": [url]})

    @staticmethod
    def _failed(exc: Exception) -> Exception:
        log.warning("discord.link_renew_failed", error=str(exc))
        return exc


def _refreshed(answer: Any, url: str) -> str | None:
    """The renewed URL for ``url`` in ``{"refreshed_urls": [{"original", "refreshed"}]}``."""
    entries = answer.get("refreshed_urls") if isinstance(answer, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("original") == url:
            fresh = entry.get("refreshed")
            return fresh if isinstance(fresh, str) and fresh else None
    return None
