"""Media in: a voice note spoken by espeak-ng through the Telegram fake is transcribed by the fake
endpoint and the model reads the words; the endpoint down leaves the attachment line and a notice;
an image with `model.vision` reaches the model as an `image_url` part."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.config import Config
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.telegram import FakeTelegram
from tests.harness import make_config, running_gateway
from tests.integration.test_telegram import TOKEN
from tests.integration.test_telegram import fast_adapter as fast_adapter  # autouse fixture
from tests.integration.test_tools_gateway import PNG

pytestmark = pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")


@pytest.fixture
def tg() -> Iterator[FakeTelegram]:
    with FakeTelegram(token=TOKEN) as fake:
        yield fake


@pytest.fixture(scope="module")
def spoken(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real WAV file of a voice saying two words, made by Debian's espeak-ng."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        pytest.skip("espeak-ng is not installed")
    out = tmp_path_factory.mktemp("voice") / "note.wav"
    subprocess.run([binary, "-w", str(out), "hello world"], check=True, timeout=30)
    return out.read_bytes()


def config(tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, **sections: Any) -> Config:
    section = {
        "enabled": True,
        "token": TOKEN,
        "base_url": tg.api_url,
        "base_file_url": tg.file_url,
        "allow_all": True,
    }
    return make_config(tmp_path, llm.base_url, platforms={"telegram": section}, **sections)


TRANSCRIBE = {"transcription": {"enabled": True, "model": "whisper-fake"}}


async def test_a_voice_note_reaches_the_model_as_its_transcript(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, spoken: bytes
) -> None:
    fake_llm.transcription = "hello world"
    fake_llm.push(text("Hello to you."))
    async with running_gateway(config(tmp_path, fake_llm, tg, media=TRANSCRIBE)):
        tg.send_voice(555, file_bytes=spoken, duration=2, mime_type="audio/wav")
        [reply] = await tg.wait_sent(1, chat_id=555, timeout=10)
    assert reply["text"] == "Hello to you."
    [upload] = fake_llm.transcription_uploads
    assert upload["model"] == "whisper-fake"
    name, _, data = upload["file"]
    assert data == spoken and data.startswith(b"RIFF") and name == "voice.wav"
    said = fake_llm.requests[0]["messages"][-1]["content"]
    assert said == "[voice note voice.ogg, transcribed]: hello world"


async def test_the_endpoint_down_leaves_the_attachment_line_and_a_notice(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, spoken: bytes
) -> None:
    fake_llm.transcriptions_down = True
    fake_llm.push(text("I got an audio file."))
    async with running_gateway(config(tmp_path, fake_llm, tg, media=TRANSCRIBE)):
        tg.send_voice(555, file_bytes=spoken, duration=2, mime_type="audio/wav")
        sent = await tg.wait_sent(2, chat_id=555, timeout=10)
    assert len(fake_llm.transcription_uploads) == 1  # it was tried
    said = fake_llm.requests[0]["messages"][-1]["content"]
    assert said.startswith("[attached voice: voice.ogg, ") and "transcribed" not in said
    # the notice goes out on its own, beside the run: either may arrive first
    notice, answer = sorted((m["text"] for m in sent), key=lambda t: t.startswith("I got"))
    assert "could not transcribe your voice note" in notice
    assert answer == "I got an audio file."


async def test_a_voice_note_too_long_is_not_sent_for_transcription(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, spoken: bytes
) -> None:
    media = {"transcription": {"enabled": True, "max_seconds": 60}}
    fake_llm.push(text("ok"))
    async with running_gateway(config(tmp_path, fake_llm, tg, media=media)):
        tg.send_voice(555, file_bytes=spoken, duration=61)
        sent = await tg.wait_sent(2, chat_id=555, timeout=10)
    assert fake_llm.transcription_uploads == []
    assert any("longer than 60 s" in m["text"] for m in sent)
    assert fake_llm.requests[0]["messages"][-1]["content"].startswith("[attached voice:")


async def test_voice_and_vision_are_off_by_default(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram, spoken: bytes
) -> None:
    fake_llm.push(text("ok"), text("ok"))
    async with running_gateway(config(tmp_path, fake_llm, tg)):
        tg.send_voice(555, file_bytes=spoken, duration=2)
        await tg.wait_sent(1, chat_id=555, timeout=10)
        tg.send_photo(555, file_bytes=PNG, caption="what is this?")
        await tg.wait_sent(2, chat_id=555, timeout=10)
    assert fake_llm.transcription_uploads == []
    voice, photo = (r["messages"][-1]["content"] for r in fake_llm.requests)
    assert voice.startswith("[attached voice: voice.ogg")
    assert photo.startswith("what is this?\n\n[attached image: photo.jpg")


async def test_an_image_reaches_a_vision_model_as_an_image_part(
    tmp_path: Path, fake_llm: FakeOpenAI, tg: FakeTelegram
) -> None:
    fake_llm.push(text("A red dot."), text("Still a red dot."))
    async with running_gateway(config(tmp_path, fake_llm, tg, model={"vision": True})):
        tg.send_photo(555, file_bytes=PNG, caption="what is this?")
        await tg.wait_sent(1, chat_id=555, timeout=10)
        tg.send_text(555, "and now?")
        await tg.wait_sent(2, chat_id=555, timeout=10)
    first, second = fake_llm.requests
    words, image = first["messages"][-1]["content"]
    assert words["type"] == "text" and words["text"].startswith("what is this?")
    assert image["type"] == "image_url"
    assert image["image_url"]["url"].startswith("data:image/jpeg;base64,iVBORw0KGgo")
    # the history keeps the turn's text alone: the image is not sent again
    assert [m["content"] for m in second["messages"][1:3]] == [words["text"], "A red dot."]
