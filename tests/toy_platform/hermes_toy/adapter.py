"""The toy adapter: long-polls the wire for messages, hands each to the gateway with who wrote
it, and posts replies back. It checks no access: admission is the core's."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import httpx

from hermes_gateway.platforms import (
    AdapterHost,
    Health,
    MessageEvent,
    OutboundMessage,
    StreamSink,
    token_verdict,
)
from hermes_toy import ToyConfig


class ToyAdapter:
    name = "toy"

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ready = False

    @property
    def config(self) -> ToyConfig:
        return self.host.config.platforms.section("toy", ToyConfig)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.config.token}"}
        )
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    def health(self) -> Health:
        return Health(self._ready, "" if self._ready else "connecting")

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        assert self._session is not None
        body = {"chat_id": message.chat_id, "text": message.text, "kind": message.kind}
        async with self._session.post(f"{self.config.url}/send", json=body) as response:
            response.raise_for_status()

    async def _poll(self) -> None:
        assert self._session is not None
        while True:
            try:
                async with self._session.get(f"{self.config.url}/updates") as response:
                    updates: list[dict[str, Any]] = await response.json()
            except aiohttp.ClientError:
                self._ready = False
                await asyncio.sleep(0.2)
                continue
            self._ready = True
            for update in updates:
                outcome = await self.host.submit(_event(update), sender=update["sender"])
                await self._session.post(
                    f"{self.config.url}/outcome", json={"id": update["id"], "outcome": outcome}
                )


def _event(update: dict[str, Any]) -> MessageEvent:
    return MessageEvent.create(
        platform="toy",
        chat_type=update["chat_type"],
        chat_id=update["chat_id"],
        user_id=update["user_id"],
        message_id=update["id"],
        text=update["text"],
        user_name=update["user_id"],
        mentioned=update.get("mentioned", False),
    )


def probe(section: ToyConfig, http: httpx.Client) -> str:
    """`hermes doctor`: ask the wire who the token belongs to."""
    response = http.get(f"{section.url}/me", headers={"Authorization": f"Bearer {section.token}"})
    return token_verdict(response, lambda data: data.get("name"))
