"""`hermes gateway run` as a process with Discord enabled, pointed at `FakeDiscord` and the fake
LLM through its config alone: a DM is answered, SIGTERM exits 0, a rejected token exits 78."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.integration.test_discord_kit import ALICE, TOKEN, fake_discord, referenced_id

pytestmark = pytest.mark.e2e


@pytest.fixture
def fake() -> Iterator[FakeDiscord]:
    with fake_discord() as fake:
        yield fake


def daemon_config(fake: FakeDiscord, llm: FakeOpenAI, token: str = TOKEN) -> dict[str, Any]:
    return {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "platforms": {
            "discord": {
                "enabled": True,
                "token": token,
                "api_base": fake.api_base,
                "gateway_url": fake.gateway_url,
                "allowed_users": [ALICE],
                "guild_ready_timeout_s": 0.05,
            }
        },
    }


def ready(gateway: GatewayProcess) -> bool:
    try:
        return httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_daemon_answers_a_discord_dm_and_exits_0_on_sigterm(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    gateway = GatewayProcess(tmp_path / "home", daemon_config(fake, fake_llm))
    try:
        gateway.start()
        wait_until(lambda: ready(gateway), timeout=20)
        dm = fake.send_dm("hello from discord", user_id=ALICE)
        wait_until(lambda: fake.sent, timeout=20)
        gateway.signal(signal.SIGTERM)
        code = gateway.wait(15)
    finally:
        gateway.kill()
    (reply,) = fake.sent
    assert (reply["content"], reply["channel_id"]) == ("echo: hello from discord", dm["channel_id"])
    assert referenced_id(reply) == dm["id"]
    assert code == 0
    events = [e["event"] for e in gateway.log_events()]
    assert events.index("discord.ready") < events.index("gateway.stopped")
    assert fake.identifies == 1


def test_daemon_with_a_rejected_discord_token_exits_78(
    tmp_path: Path, fake_llm: FakeOpenAI, fake: FakeDiscord
) -> None:
    gateway = GatewayProcess(tmp_path / "home", daemon_config(fake, fake_llm, token="wrong"))
    try:
        gateway.start(wait=False)
        code = gateway.wait(20)
    finally:
        gateway.kill()
    assert code == 78
    assert "platforms.discord.token" in gateway.stderr()
    assert fake.identifies == 0
