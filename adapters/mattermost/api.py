"""Mattermost's REST v4 API as the adapter uses it, on aiohttp (the stack that also carries the
WebSocket): each call bounded and retried, the rate limit headers honoured, the error body
(``{id, message, status_code}``) translated into `hermes_gateway.errors` at this edge."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from adapters.mattermost.settings import api_base
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterError,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
    header,
    retry_after_s,
    with_retry,
)

REQUEST_TIMEOUT_S = 10.0
UPLOAD_TIMEOUT_S = 120.0  # a file of up to 100 MB
MAX_RATE_WAIT_S = 60.0  # a reset further away than this is read as a clock, capped
JsonDict = dict[str, Any]


def api_error(status: int, body: bytes, headers: Mapping[str, str], what: str) -> AdapterError:
    """The gateway's error for a Mattermost answer of ``status`` >= 400 (its body names why)."""
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        data = {}
    data = data if isinstance(data, dict) else {}
    why = str(data.get("message") or data.get("id") or f"HTTP {status}")
    detail = f"{what}: HTTP {status} {data.get('id') or ''} {why}".replace("  ", " ").strip()
    if status == 429:
        wait = header(headers, "Retry-After") or header(headers, "X-Ratelimit-Reset")
        return RateLimitedError(detail, retry_after_s(wait, cap=MAX_RATE_WAIT_S))
    if status == 401:
        return AdapterAuthError(f"{what}: Mattermost rejected the token ({why})")
    if status >= 500 or status == 408:
        return TransientAdapterError(detail)
    return PermanentAdapterError(detail)


class RateGate:
    """Mattermost's rate limit headers: once ``X-Ratelimit-Remaining`` says 0, the next call
    waits until ``X-Ratelimit-Reset`` (seconds) has passed, rather than earn a 429."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.open_at = 0.0
        self.limit = 0  # the server's requests per second, as it last said

    def note(self, headers: Mapping[str, str]) -> None:
        limit, remaining = (
            header(headers, "X-Ratelimit-Limit"),
            header(headers, "X-Ratelimit-Remaining"),
        )
        if limit is not None and str(limit).isdigit():
            self.limit = int(limit)
        if remaining is not None and str(remaining).strip() == "0":
            reset = retry_after_s(header(headers, "X-Ratelimit-Reset"), cap=MAX_RATE_WAIT_S)
            self.open_at = max(self.open_at, self.clock() + reset)

    def wait_s(self) -> float:
        return max(0.0, self.open_at - self.clock())


class MattermostApi:
    """The calls the adapter makes, on one keep-alive session carrying the bot's token."""

    def __init__(self, url: str, token: str, *, attempts: int = 4) -> None:
        self.base = api_base(url)
        self.attempts = attempts
        self.gate = RateGate()
        self.stop = asyncio.Event()  # set at close: waiting retries give up
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"},
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
        )

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        attempts: int | None = None,
    ) -> Any:
        """One REST call with bounded retries (429 as the server asks, 5xx backed off); its
        parsed JSON answer."""
        what = f"{method} {path.split('?')[0]}"

        async def once() -> Any:
            if (wait := self.gate.wait_s()) > 0:
                await asyncio.sleep(wait)
            try:
                async with self.session.request(
                    method, self.base + path, json=body, params=params
                ) as response:
                    self.gate.note(response.headers)
                    data = await response.read()
                    if response.status >= 400:
                        raise api_error(response.status, data, response.headers, what)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise TransientAdapterError(f"{what}: {type(exc).__name__}: {exc}") from exc
            try:
                return json.loads(data) if data else None
            except ValueError as exc:
                raise TransientAdapterError(f"{what}: an answer that is not JSON") from exc

        tries = attempts or self.attempts
        return await with_retry(once, what=what, attempts=tries, base_delay=0.3, stop=self.stop)

    async def me(self) -> JsonDict:
        return _object(await self.call("GET", "/users/me", attempts=1))

    async def create_post(
        self,
        channel_id: str,
        message: str,
        root_id: str = "",
        *,
        key: str | None = None,
        attempts: int | None = None,
        file_ids: tuple[str, ...] = (),
    ) -> JsonDict:
        """Post ``message`` (with uploaded ``file_ids``); with ``key`` as its
        ``pending_post_id`` (the server answers a repeat with the first post for a while) and
        in its props (kept with the post: what the sent-check looks for)."""
        body: JsonDict = {"channel_id": channel_id, "message": message, "root_id": root_id}
        if file_ids:
            body["file_ids"] = list(file_ids)
        if key:
            body["pending_post_id"] = key
            body["props"] = {PROP_KEY: key}
        return _object(await self.call("POST", "/posts", body=body, attempts=attempts))

    async def upload(self, channel_id: str, name: str, data: bytes) -> str:
        """Upload one file into ``channel_id`` (POST /files, multipart); its file id, which a
        post then carries. Retried like any call: a file uploaded twice is only an unused one."""
        return await with_retry(
            lambda: self._upload_once(channel_id, name, data),
            what="POST /files",
            attempts=3,
            base_delay=0.3,
            stop=self.stop,
        )

    async def _upload_once(self, channel_id: str, name: str, data: bytes) -> str:
        form = aiohttp.FormData()
        form.add_field("channel_id", channel_id)
        form.add_field("files", data, filename=name, content_type="application/octet-stream")
        what = "POST /files"
        try:
            async with self.session.post(
                self.base + "/files",
                data=form,
                timeout=aiohttp.ClientTimeout(total=UPLOAD_TIMEOUT_S),
            ) as response:
                self.gate.note(response.headers)
                raw = await response.read()
                if response.status >= 400:
                    raise api_error(response.status, raw, response.headers, what)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise TransientAdapterError(f"{what}: {type(exc).__name__}: {exc}") from exc
        try:
            infos = json.loads(raw).get("file_infos")
            return str(infos[0]["id"])
        except (ValueError, AttributeError, LookupError, TypeError) as exc:
            raise TransientAdapterError(f"{what}: no file id in the answer") from exc

    async def patch_post(self, post_id: str, message: str, *, attempts: int | None = None) -> None:
        await self.call(
            "PUT", f"/posts/{post_id}/patch", body={"message": message}, attempts=attempts
        )

    async def typing(self, user_id: str, channel_id: str, parent_id: str = "") -> None:
        body = {"channel_id": channel_id, "parent_id": parent_id}
        await self.call("POST", f"/users/{user_id}/typing", body=body, attempts=1)

    async def file_info(self, file_id: str) -> JsonDict:
        return _object(await self.call("GET", f"/files/{file_id}/info", attempts=2))

    async def channel(self, channel_id: str) -> JsonDict:
        return _object(await self.call("GET", f"/channels/{channel_id}", attempts=2))

    async def direct_channel(self, user_a: str, user_b: str) -> JsonDict:
        return _object(await self.call("POST", "/channels/direct", body=[user_a, user_b]))

    async def my_channels(self) -> list[JsonDict]:
        """The bot's channels in every team it is in, its direct and group channels included
        (each once), with their ``last_post_at``."""
        teams = await self.call("GET", "/users/me/teams", attempts=2)
        found: dict[str, JsonDict] = {}
        for team in teams if isinstance(teams, list) else []:
            team_id = team.get("id") if isinstance(team, dict) else None
            if not isinstance(team_id, str) or not team_id:
                continue
            channels = await self.call("GET", f"/users/me/teams/{team_id}/channels", attempts=2)
            for channel in channels if isinstance(channels, list) else []:
                if isinstance(channel, dict) and isinstance(channel.get("id"), str):
                    found[channel["id"]] = channel
        return list(found.values())

    async def posts_since(self, channel_id: str, since_ms: int) -> list[JsonDict]:
        """The channel's posts created or changed after ``since_ms`` (epoch ms, strictly), oldest
        first."""
        params = {"since": str(since_ms)}
        data = _object(await self.call("GET", f"/channels/{channel_id}/posts", params=params))
        posts, order = data.get("posts"), data.get("order")
        if not isinstance(posts, dict) or not isinstance(order, list):
            return []
        found = [posts[i] for i in order if isinstance(posts.get(i), dict)]
        return sorted(found, key=lambda p: _int(p.get("create_at")))

    async def close(self) -> None:
        self.stop.set()
        await self.session.close()


PROP_KEY = "hermes_key"  # the post prop carrying a reply part's idempotency key


def _object(data: Any) -> JsonDict:
    if not isinstance(data, dict):
        raise TransientAdapterError("Mattermost answered something other than an object")
    return data


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
