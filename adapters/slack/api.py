"""The Slack Web API as the adapter uses it: each call bounded, retried (`Retry-After`, 5xx) and
its slack-sdk / aiohttp errors translated into `hermes_gateway.errors` at this edge; and where
(and how) shared files are downloaded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.settings import SlackConfig
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    Downloader,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
    header,
    origins,
    retry_after_s,
    with_retry,
)

T = TypeVar("T")

# `error` codes meaning Slack rejected our token: configuration, not a passing failure
AUTH_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
        "invalid_token",
    }
)
TRANSIENT_ERRORS = frozenset({"internal_error", "fatal_error", "service_unavailable", "timeout"})
REQUEST_TIMEOUT_S = 10.0
FILE_HOSTS = ("https://files.slack.com",)  # where url_private / url_private_download point


def normalize_base_url(url: str) -> str:
    """slack-sdk `urljoin`s method names onto the base: without a trailing slash the last path
    segment (``/api``) would be replaced."""
    return url if url.endswith("/") else url + "/"


def translate(exc: BaseException, what: str) -> AdapterError:
    """The gateway's error for a failed Slack call (``raise translate(exc, ...) from exc``)."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = int(getattr(response, "status_code", 200) or 200)
        code = error_code(response.data)
        if status == 429 or code == "ratelimited":
            return RateLimitedError(
                f"{what}: rate limited", retry_after_s(header(response.headers))
            )
        if code in AUTH_ERRORS:
            return AdapterAuthError(f"{what}: Slack rejected the token ({code})")
        if status >= 500 or code in TRANSIENT_ERRORS:
            return TransientAdapterError(f"{what}: HTTP {status} {code}".rstrip())
        return PermanentAdapterError(f"{what}: {code or f'HTTP {status}'}")
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return TransientAdapterError(f"{what}: {type(exc).__name__}: {exc}".rstrip(": "))
    return PermanentAdapterError(f"{what}: {type(exc).__name__}: {exc}")


def error_code(data: Any) -> str:
    if isinstance(data, Mapping):
        return str(data.get("error") or "")
    return ""


def file_downloader(config: SlackConfig, folder: Path) -> Downloader:
    """Downloads of ``url_private`` files: from Slack's file host or the configured API base's
    host (a proxy, a fake), with the bot token; its sign-in page means access was refused."""
    return Downloader(
        "slack",
        folder,
        config.media_max_bytes,
        origins(*FILE_HOSTS, normalize_base_url(config.api_base)),
        refuse_html=True,
        denied_hint=" (the bot token needs the files:read scope)",
    )


_TRANSLATED = (SlackClientError, aiohttp.ClientError, TimeoutError, OSError)


class SlackWeb:
    """The calls the adapter makes, on one bot-token client and one connection pool."""

    def __init__(self, token: str, base_url: str, *, attempts: int = 5) -> None:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))
        # retries are ours (with_retry), so the SDK's own handlers are off: no double posts
        self.client = AsyncWebClient(
            token=token,
            base_url=normalize_base_url(base_url),
            session=self.session,
            timeout=int(REQUEST_TIMEOUT_S),
            retry_handlers=[],
        )
        self.attempts = attempts
        self.stop = asyncio.Event()  # set at close: waiting retries give up

    async def call(
        self, what: str, fn: Callable[[], Awaitable[T]], *, attempts: int | None = None
    ) -> T:
        """Run one Web API call with translation and bounded retry."""

        async def once() -> T:
            try:
                return await asyncio.wait_for(fn(), REQUEST_TIMEOUT_S + 1)
            except _TRANSLATED as exc:
                raise translate(exc, what) from exc

        tries = attempts or self.attempts
        return await with_retry(once, what=what, attempts=tries, base_delay=0.3, stop=self.stop)

    async def auth_test(self) -> Any:
        """The `AsyncSlackResponse` (bolt's authorization reads its headers too)."""
        return await self.call("auth.test", self.client.auth_test, attempts=1)

    async def socket_url(self, app_token: str) -> str:
        response = await self.call(
            "apps.connections.open",
            lambda: self.client.apps_connections_open(app_token=app_token),
            attempts=1,
        )
        return str(response["url"])

    async def post(
        self,
        channel: str,
        text: str,
        thread_ts: str | None,
        *,
        attempts: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Post one message (with ``metadata``: kept by Slack, returned by history); its ts."""
        response = await self.call(
            "chat.postMessage",
            lambda: self.client.chat_postMessage(
                channel=channel,
                text=text,
                thread_ts=thread_ts,
                mrkdwn=True,
                unfurl_links=False,
                metadata=metadata,
            ),
            attempts=attempts,
        )
        return str(response.get("ts") or "")

    async def upload(
        self, channel: str, thread_ts: str | None, data: bytes, name: str, caption: str
    ) -> None:
        """Share one file in the channel (thread) with ``caption`` as its comment, through
        files_upload_v2 (files.getUploadURLExternal, the upload, files.completeUploadExternal:
        the token needs ``files:write``)."""
        await self.call(
            "files.upload_v2",
            lambda: self.client.files_upload_v2(
                channel=channel,
                thread_ts=thread_ts,
                file=data,
                filename=name,
                title=name,
                initial_comment=caption or None,
            ),
        )

    async def update(
        self, channel: str, ts: str, text: str, *, attempts: int | None = None
    ) -> None:
        await self.call(
            "chat.update",
            lambda: self.client.chat_update(channel=channel, ts=ts, text=text),
            attempts=attempts,
        )

    async def delete(self, channel: str, ts: str) -> None:
        await self.call(
            "chat.delete", lambda: self.client.chat_delete(channel=channel, ts=ts), attempts=2
        )

    async def react(self, channel: str, ts: str, name: str, *, add: bool) -> None:
        method = self.client.reactions_add if add else self.client.reactions_remove
        what = "reactions.add" if add else "reactions.remove"
        try:
            await self.call(
                what, lambda: method(channel=channel, timestamp=ts, name=name), attempts=2
            )
        except PermanentAdapterError as exc:
            # already in the state we want (a replayed run, a reaction someone else removed)
            if not isinstance(exc.__cause__, SlackApiError) or error_code(
                exc.__cause__.response.data
            ) not in ("already_reacted", "no_reaction"):
                raise

    async def set_status(self, channel: str, thread_ts: str, status: str) -> None:
        await self.call(
            "assistant.threads.setStatus",
            lambda: self.client.assistant_threads_setStatus(
                channel_id=channel, thread_ts=thread_ts, status=status
            ),
            attempts=2,
        )

    async def close(self) -> None:
        self.stop.set()
        await self.session.close()
