"""`hermes gateway run` as a real process on Telegram: the fake Bot API and the fake LLM, a
message answered, SIGTERM exits 0; a token Telegram rejects exits 78."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]
TOKEN = "123:ABC"


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


def telegram_gateway(
    home: Path, llm: FakeOpenAI, fake: FakeTelegram, token: str = TOKEN
) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": token,
                "base_url": fake.api_url,
                "base_file_url": fake.file_url,
                "allowed_users": [555],
            }
        },
    }
    return GatewayProcess(home, config)


def test_a_telegram_message_is_answered_and_sigterm_exits_0(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    gateway = telegram_gateway(tmp_path / "home", fake_llm, tg)
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200)
        tg.send_text(555, "hello from telegram")
        wait_until(lambda: tg.messages_to(555), timeout=15)
        gateway.signal(signal.SIGTERM)
        code = gateway.wait(15)
    finally:
        gateway.kill()
    assert code == 0, gateway.stderr()
    [reply] = tg.messages_to(555)
    assert reply["text"] == "echo: hello from telegram"
    events = [e["event"] for e in gateway.log_events()]
    assert events.index("telegram.connected") < events.index("gateway.stopped")
    assert tg.pending_updates == []  # the final getUpdates confirmed the offset


def test_a_token_telegram_rejects_exits_78(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    gateway = telegram_gateway(tmp_path / "home", fake_llm, tg, token="999:WRONG")
    try:
        gateway.start(wait=False)
        code = gateway.wait(20)
    finally:
        gateway.kill()
    assert code == 78
    stderr = gateway.stderr()
    assert "platforms.telegram.token" in stderr and "rejected" in stderr
    assert "999:WRONG" not in stderr
