"""`hermes gateway run` on Telegram with voice notes transcribed and a vision model: an espeak-ng
voice note reaches the model as its transcript, a photo as an `image_url` part."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.e2e.test_telegram_e2e import TOKEN
from tests.e2e.test_telegram_e2e import tg as tg  # fixture
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.fakes.telegram import FakeTelegram
from tests.integration.test_media_in import spoken as spoken  # fixture
from tests.integration.test_tools_gateway import PNG

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
]


def test_a_voice_note_and_a_photo_reach_the_model_through_the_daemon(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, spoken: bytes
) -> None:
    config: dict[str, Any] = {
        "model": {
            "base_url": fake_llm.base_url,
            "api_key": "sk-fake",
            "max_retries": 0,
            "vision": True,
        },
        "media": {"transcription": {"enabled": True}},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token": TOKEN,
                "base_url": tg.api_url,
                "base_file_url": tg.file_url,
                "allowed_users": [555],
            }
        },
    }
    fake_llm.transcription = "hello world"
    fake_llm.push(text("Heard you."), text("A dot."))
    gateway = GatewayProcess(tmp_path / "home", config)
    try:
        gateway.start()
        wait_until(lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200)
        tg.send_voice(555, file_bytes=spoken, duration=2, mime_type="audio/wav")
        wait_until(lambda: len(tg.messages_to(555)) == 1, timeout=15)
        tg.send_photo(555, file_bytes=PNG)
        wait_until(lambda: len(tg.messages_to(555)) == 2, timeout=15)
        gateway.signal(signal.SIGTERM)
        code = gateway.wait(15)
    finally:
        gateway.kill()
    assert code == 0, gateway.stderr()
    assert [m["text"] for m in tg.messages_to(555)] == ["Heard you.", "A dot."]
    [upload] = fake_llm.transcription_uploads
    assert upload["file"][2] == spoken
    voice, photo = (r["messages"][-1]["content"] for r in fake_llm.requests)
    assert voice == "[voice note voice.ogg, transcribed]: hello world"
    assert photo[1]["image_url"]["url"].startswith("data:image/jpeg;base64,iVBORw0KGgo")
