"""`InboundMedia` on its own: an audio file's length read from its header when the platform
announced none (WAV, Ogg Opus), and a file too long by it never uploaded."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.events import Attachment
from hermes_gateway.media_in import InboundMedia, MediaSettings, Transcriber, TranscriptionSettings
from hermes_gateway.media_in.probe import audio_seconds
from tests.fakes.openai import FakeOpenAI
from tests.harness import dm
from tests.integration.test_media_in import spoken as spoken  # fixture


def test_a_wav_files_length_comes_from_its_header(tmp_path: Path, spoken: bytes) -> None:
    path = tmp_path / "note.wav"
    path.write_bytes(spoken)
    assert 0.3 < audio_seconds(path) < 5  # espeak-ng saying two words


def test_an_ogg_opus_files_length_is_its_last_granule_position(tmp_path: Path) -> None:
    first = b"OggS\x00\x02" + bytes(8) + bytes(12) + b"\x01\x13OpusHead\x01\x01" + bytes(30)
    last = b"OggS\x00\x04" + (96_000 + 312).to_bytes(8, "little") + bytes(40)
    path = tmp_path / "voice.ogg"
    path.write_bytes(first + bytes(5000) + last)
    assert audio_seconds(path) == (96_000 + 312) / 48_000
    path.write_bytes(b"ID3" + bytes(100))
    assert audio_seconds(path) == 0.0  # a format not read here: unknown


async def test_a_note_too_long_by_its_header_is_not_uploaded(
    tmp_path: Path, fake_llm: FakeOpenAI, spoken: bytes
) -> None:
    path = tmp_path / "note.wav"
    path.write_bytes(spoken)
    note = Attachment("audio", name="note.wav", size=len(spoken), path=str(path))
    settings = TranscriptionSettings(fake_llm.base_url, "sk-fake", "whisper-1")
    media = InboundMedia(
        MediaSettings(transcribe=True, max_audio_seconds=0.2), {}, Transcriber(settings)
    )
    event = dm("1", "[attached audio: note.wav, 44 KB]", attachments=(note,))
    turn = await media.prepare([event])
    assert fake_llm.transcription_uploads == []
    assert turn.events == (event,)
    [notice] = turn.notices
    assert "could not transcribe your audio file" in notice and "longer than 0.2 s" in notice
