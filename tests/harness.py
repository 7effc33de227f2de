"""Test harness: a `Gateway` running in the test's own loop against the fake LLM, and a small
client for its control API (operator calls carry the token the CLI would send)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from hermes_gateway.config import Config, load_config
from hermes_gateway.control.token import operator_token
from hermes_gateway.dashboard.auth import COOKIE
from hermes_gateway.events import MessageEvent
from hermes_gateway.server import Gateway


def dm(
    message_id: str,
    text: str,
    *,
    platform: str = "telegram",
    chat: str = "555",
    user: str | None = None,
    **fields: Any,
) -> MessageEvent:
    """A direct message as an adapter would normalize it (the user is the chat unless given)."""
    return MessageEvent.create(
        platform=platform,
        chat_type="dm",
        chat_id=chat,
        user_id=user or chat,
        message_id=message_id,
        text=text,
        **fields,
    )


def make_config(tmp_path: Path, llm_url: str | None, **sections: Any) -> Config:
    """A config with its home in ``tmp_path``; ``sections`` deep-merge over the defaults."""
    data: dict[str, Any] = {
        "home": str(tmp_path / "home"),
        # no RSS ceiling: a gateway started here shares the test worker's process, whose
        # resident memory is every test's so far, not the gateway's
        "control": {"port": 0, "max_rss_bytes": 0},
        "model": {
            "base_url": llm_url or "https://api.openai.com/v1",
            "api_key": "sk-fake" if llm_url else "",
            "timeout_s": 10,
            "max_retries": 0,
        },
        "runner": {"stop_grace_s": 0.5, "drain_timeout_s": 2},
        "watchdog": {"fatal_s": 30},
        "logging": {"format": "json"},
    }
    _merge(data, sections)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path, {"HOME": str(tmp_path)})


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


class Client:
    """Talks to a running gateway's control API like `hermes chat` does; ``operator`` is the
    header the operator's commands send (the configured token, else the generated file's)."""

    def __init__(
        self, session: aiohttp.ClientSession, base: str, operator: dict[str, str] | None = None
    ) -> None:
        self.http = session
        self.base = base
        self.operator = operator or {}

    async def chat(
        self, text: str, user: str = "alice", *, stream: bool = False, key: str | None = None
    ) -> dict[str, Any]:
        """POST one message; returns {"status", "text", "kind", "body"}."""
        body = {"user": user, "stream": stream, "messages": [{"role": "user", "content": text}]}
        headers = {"Idempotency-Key": key} if key else {}
        async with self.http.post(
            f"{self.base}/v1/chat/completions", json=body, headers=headers
        ) as resp:
            if stream and resp.status == 200:
                return await _read_sse(resp)
            data = await resp.json()
            if resp.status != 200:
                return {"status": resp.status, "text": None, "kind": None, "body": data}
            return {
                "status": 200,
                "text": data["choices"][0]["message"]["content"],
                "kind": data["hermes"]["kind"],
                "body": data,
            }

    async def history(self, user: str = "alice") -> list[dict[str, Any]]:
        async with self.http.get(f"{self.base}/v1/history", params={"user": user}) as resp:
            data = await resp.json()
            return list(data["messages"])

    async def get(self, path: str, *, operator: bool = False) -> tuple[int, Any]:
        """GET ``path``; ``operator``: with the control token (`/status`, `/pairing`, ...)."""
        headers = self.operator if operator else {}
        async with self.http.get(f"{self.base}{path}", headers=headers) as resp:
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()

    async def dashboard_login(self) -> None:
        """Log this client's session into the dashboard as `hermes dashboard`'s link does: a
        one-time link got with the control token, opened; its cookie then goes with every
        request (aiohttp's jar keeps a Secure cookie for https only)."""
        async with self.http.post(f"{self.base}/dashboard-link", headers=self.operator) as resp:
            assert resp.status == 200, await resp.text()
            path = (await resp.json())["path"]
        async with self.http.get(f"{self.base}{path}", allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
            cookie = resp.cookies[COOKIE].value
        self.http.headers["Cookie"] = f"{COOKIE}={cookie}"


async def _read_sse(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """The streamed reply; ``shown`` is what a client shows, in order: the text's pieces and
    the tool notes ("[tool start: name]")."""
    deltas: list[str] = []
    shown: list[str] = []
    kind = None
    async for raw in resp.content:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for choice in chunk["choices"]:
            piece = choice["delta"].get("content")
            if piece:
                deltas.append(piece)
                shown.append(piece)
        extra = chunk.get("hermes") or {}
        if "tool" in extra:
            shown.append(f"[tool {extra['phase']}: {extra['tool']}]")
        kind = extra.get("kind", kind)
    text = "".join(deltas)
    return {
        "status": 200,
        "text": text,
        "kind": kind,
        "deltas": deltas,
        "shown": shown,
        "body": None,
    }


@contextlib.asynccontextmanager
async def running_gateway(config: Config) -> AsyncIterator[tuple[Gateway, Client]]:
    """Start a gateway in this loop (no signal handlers); stop it cleanly afterwards."""
    gateway = Gateway(config)
    await gateway.startup()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            base = f"http://127.0.0.1:{gateway.control.port}"
            yield gateway, Client(http, base, operator_headers(config))
    finally:
        await gateway.shutdown()


def operator_headers(config: Config) -> dict[str, str]:
    """The bearer header of the operator's commands, read as the CLI reads it (the file is
    there once a gateway on this home has started)."""
    token = operator_token(config.control.token, config.home_path)
    assert token is not None, "no control token yet: start the gateway first"
    return {"Authorization": f"Bearer {token}"}


async def eventually(predicate: Any, timeout: float = 10.0) -> Any:
    """Wait until ``predicate()`` is truthy (polling the loop); fail after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not true within {timeout}s: {predicate}")
        await asyncio.sleep(0.01)
