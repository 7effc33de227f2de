"""A platform added through its `PlatformSpec` alone: `tests/toy_platform/` is put on the gateway
child's `PYTHONPATH`, where a minimal dist-info registers it as an entry point; no gateway file
names it. A real `hermes gateway run` reads its section, fills its token from the variable
its spec names, starts its adapter, and admits its messages: the allowed user is answered by
the model, a stranger gets a pairing code and no model call, although the toy adapter checks
nothing itself. `hermes doctor` runs its probe, and `config check` its required keys."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import FakeServer, wait_until

pytestmark = pytest.mark.e2e
TOY_SITE = Path(__file__).resolve().parent.parent / "toy_platform"
TOKEN = "toy-secret-token"


class ToyWire(FakeServer):
    """The toy platform's server: updates are long-polled, replies and outcomes posted."""

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.outcomes: dict[str, str] = {}
        self.unauthorized = 0
        self.app.router.add_get("/updates", self._updates)
        self.app.router.add_post("/send", self._send)
        self.app.router.add_post("/outcome", self._outcome)
        self.app.router.add_get("/me", self._me)

    def _authorized(self, request: web.Request) -> bool:
        ok = request.headers.get("Authorization") == f"Bearer {TOKEN}"
        self.unauthorized += not ok
        return ok

    async def _updates(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "bad token"}, status=401)
        for _ in range(20):
            if self.queue:
                break
            await asyncio.sleep(0.05)
        updates, self.queue[:] = list(self.queue), []
        return web.json_response(updates)

    async def _send(self, request: web.Request) -> web.Response:
        self.sent.append(await request.json())
        return web.json_response({"ok": True})

    async def _outcome(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.outcomes[body["id"]] = body["outcome"]
        return web.json_response({"ok": True})

    async def _me(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.json_response({"error": "bad token"}, status=401)
        return web.json_response({"name": "toybot"})

    def say(self, msg_id: str, user: str, text: str, chat_type: str = "dm") -> None:
        chat = user if chat_type == "dm" else "the-group"
        update = {"id": msg_id, "sender": "user", "chat_type": chat_type, "chat_id": chat}
        self.call_soon(self.queue.append, {**update, "user_id": user, "text": text})

    def sent_to(self, chat: str) -> list[str]:
        return [m["text"] for m in list(self.sent) if m["chat_id"] == chat]


@pytest.fixture
def wire() -> Iterator[ToyWire]:
    with ToyWire() as fake:
        yield fake


def toy_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(TOY_SITE), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "TOY_TOKEN": TOKEN}


def toy_gateway(home: Path, llm: FakeOpenAI, wire: ToyWire, **section: Any) -> GatewayProcess:
    toy = {"enabled": True, "url": wire.url, "allowed_users": ["alice"], "pairing": True}
    config = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "platforms": {"api": {"enabled": False}, "toy": {**toy, **section}},
    }
    return GatewayProcess(home, config, env=toy_env())


def hermes(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``hermes ARGS`` as the operator runs it, ``CONFIG`` standing for the gateway's file."""
    args = tuple(str(gateway.config_path) if a == "CONFIG" else a for a in args)
    command = [sys.executable, "-m", "hermes_gateway", *args]
    return subprocess.run(command, env=gateway.env, capture_output=True, text=True, timeout=60)


def test_a_toy_platform_chats_end_to_end_with_default_deny_from_the_core(
    tmp_path: Path, fake_llm: FakeOpenAI, wire: ToyWire
) -> None:
    gateway = toy_gateway(tmp_path / "home", fake_llm, wire)
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200)
        wire.say("1", "alice", "hello toy")
        assert wait_until(lambda: wire.sent_to("alice"), timeout=20) == ["echo: hello toy"]
        assert wire.outcomes["1"] == "accepted"

        wire.say("2", "mallory", "let me in")
        [code_reply] = wait_until(lambda: wire.sent_to("mallory"), timeout=20)
        assert "hermes pairing approve toy " in code_reply
        wire.say("3", "mallory", "hello? @toybot", chat_type="group")  # not addressed
        wait_until(lambda: "3" in wire.outcomes, timeout=20)
        assert wire.outcomes["2"] == wire.outcomes["3"] == "refused"
        assert len(fake_llm.requests) == 1  # only alice's message reached the model
        assert wire.sent_to("the-group") == []

        code = code_reply.split("hermes pairing approve toy ")[1].split()[0]
        approved = hermes(gateway, "pairing", "--config", "CONFIG", "approve", "toy", code)
        assert approved.returncode == 0, approved.stderr
        wait_until(lambda: len(wire.sent_to("mallory")) == 2, timeout=20)  # "you're approved"
        wire.say("4", "mallory", "now?")
        wait_until(lambda: len(wire.sent_to("mallory")) == 3, timeout=20)
        assert wire.sent_to("mallory")[2] == "echo: now?"
        assert wire.outcomes["4"] == "accepted"
        assert wire.unauthorized == 0  # the token came from TOY_TOKEN, as the spec says
    finally:
        gateway.kill()


def test_doctor_runs_the_toy_probe_and_config_check_its_required_keys(
    tmp_path: Path, fake_llm: FakeOpenAI, wire: ToyWire
) -> None:
    gateway = toy_gateway(tmp_path / "home", fake_llm, wire)
    doctor = hermes(gateway, "doctor", "--config", "CONFIG")
    assert "toy" in doctor.stdout and "token valid: toybot" in doctor.stdout, doctor.stdout

    gateway.env.pop("TOY_TOKEN")
    missing = hermes(gateway, "config", "check", "--config", "CONFIG")
    assert missing.returncode == 78
    assert "platforms.toy.token: must be set when platforms.toy.enabled is true" in (
        missing.stderr + missing.stdout
    )
    assert "(or set TOY_TOKEN)" in missing.stderr + missing.stdout

    bad = toy_gateway(tmp_path / "bad", fake_llm, wire, colour="red")
    unknown = hermes(bad, "config", "check", "--config", "CONFIG")
    assert unknown.returncode == 78
    assert "platforms.toy.colour: unknown key" in unknown.stderr + unknown.stdout
