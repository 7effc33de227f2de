"""The transcription client: an OpenAI-compatible `/v1/audio/transcriptions` through the `openai`
SDK, one multipart upload per file. Blocking: the gateway calls it with `asyncio.to_thread`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent_core.completion import ModelError
from agent_core.llm import LazyClient

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, slots=True)
class TranscriptionSettings:
    base_url: str
    api_key: str
    model: str
    timeout_s: float = 60.0


class Transcriber:
    """One client for the process, built at its first call; safe to share across threads."""

    def __init__(self, settings: TranscriptionSettings) -> None:
        self.settings = settings
        self._client = LazyClient(settings.base_url, settings.api_key, settings.timeout_s)

    def close(self) -> None:
        self._client.close()

    def transcribe(self, path: Path, name: str) -> str:
        """The words spoken in the audio file at ``path``; raises `ModelError` on any failure
        (no retry: the user waits for the answer, and the file still reaches the model as a
        line)."""
        import openai

        try:
            with path.open("rb") as audio:
                upload = (upload_name(audio.read(12), name), audio)
                audio.seek(0)
                result = self._client.get().audio.transcriptions.create(
                    model=self.settings.model, file=upload, response_format="json"
                )
        except openai.APIStatusError as exc:
            raise ModelError(f"HTTP {exc.status_code}", status=exc.status_code) from exc
        except openai.APIError as exc:  # timeouts, refused connections, unreadable answers
            raise ModelError(type(exc).__name__) from exc
        text = getattr(result, "text", None)
        if not isinstance(text, str):
            raise ModelError("the transcription endpoint sent no text")
        return text.strip()


SUFFIXES = {b"RIFF": ".wav", b"OggS": ".ogg", b"fLaC": ".flac", b"ID3": ".mp3"}


def upload_name(head: bytes, name: str) -> str:
    """The file name the endpoint is sent: OpenAI's picks the decoder by its extension, so the
    extension follows the content where it is known (a WAV sent as a voice note)."""
    stem = name.rsplit(".", 1)[0] if "." in name else name
    for magic, suffix in SUFFIXES.items():
        if head.startswith(magic):
            return (stem or "audio") + suffix
    return name
