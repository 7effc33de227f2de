"""A turn's input from its messages: voice notes and audio files transcribed into the text (when
`media.transcription.enabled`), images fetched as data URLs for a vision model (`model.vision`).

Runs on the event loop before the run is handed to a pool thread: downloads are the adapters'
coroutines, and the blocking SDK call goes to a thread. Anything that fails leaves the message
as it was (its attachment line), and the user hears why in a notice.
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog

from agent_core.completion import ModelError
from hermes_gateway.errors import AdapterError
from hermes_gateway.events import Attachment, MessageEvent
from hermes_gateway.media_in.probe import audio_seconds
from hermes_gateway.media_in.transcriber import Transcriber

log = structlog.get_logger("hermes.media")

Download = Callable[[Attachment], Awaitable[Path]]
AUDIO_KINDS = ("voice", "audio")
FAILED = "I could not transcribe your {what} ({why}), so it reached me only as an attachment."


@dataclass(frozen=True, slots=True)
class MediaSettings:
    transcribe: bool = False
    max_audio_bytes: int = 10 * 1024 * 1024
    max_audio_seconds: float = 300.0
    vision: bool = False
    max_images: int = 4
    max_image_bytes: int = 5 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TurnInput:
    """A run's messages as the agent gets them (voice notes' lines now their words), the
    images as data URLs, and the notices the user is sent before the answer."""

    events: tuple[MessageEvent, ...]
    images: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()


class InboundMedia:
    """Turns a run's messages into its `TurnInput`; ``adapters`` is the gateway's live map."""

    def __init__(
        self,
        settings: MediaSettings,
        adapters: Mapping[str, Any],
        transcriber: Transcriber | None = None,
    ) -> None:
        self.settings = settings
        self.adapters = adapters
        self.transcriber = transcriber

    async def close(self) -> None:
        """At shutdown, once no run is left: the transcription client's connections."""
        if self.transcriber is not None:
            await asyncio.to_thread(self.transcriber.close)

    async def prepare(self, events: list[MessageEvent]) -> TurnInput:
        notices: list[str] = []
        out = [await self._transcribed(e, notices) for e in events]
        images = await self._images(out) if self.settings.vision else ()
        return TurnInput(tuple(out), images, tuple(notices))

    # -- voice notes ------------------------------------------------------------------------

    async def _transcribed(self, event: MessageEvent, notices: list[str]) -> MessageEvent:
        if not self.settings.transcribe or self.transcriber is None:
            return event
        text = event.text
        for a in event.attachments:
            if a.kind in AUDIO_KINDS or a.mime_type.startswith("audio/"):
                words = await self._transcribe(event.platform, a, notices)
                if words is not None:
                    text = _swap_line(text, a, f"[{_what(a)} {a.name}, transcribed]: {words}")
        return replace(event, text=text) if text != event.text else event

    async def _transcribe(self, platform: str, a: Attachment, notices: list[str]) -> str | None:
        """The attachment's words, or None (a notice says why)."""
        s, what = self.settings, _what(a)
        if a.duration > s.max_audio_seconds or a.size > s.max_audio_bytes:
            notices.append(FAILED.format(what=what, why=_too_big(s)))
            return None
        try:
            path = await self._fetch(platform, a)
            size = await asyncio.to_thread(lambda: path.stat().st_size)
            # the platform's word on its length, else the file's own header
            seconds = a.duration or await asyncio.to_thread(audio_seconds, path)
            if size > s.max_audio_bytes or seconds > s.max_audio_seconds:
                notices.append(FAILED.format(what=what, why=_too_big(s)))
                return None
            assert self.transcriber is not None
            words = await asyncio.to_thread(self.transcriber.transcribe, path, a.name or "audio")
        except (AdapterError, OSError, ModelError) as exc:
            log.warning("media.transcription_failed", name=a.name, error=str(exc))
            notices.append(FAILED.format(what=what, why="the transcription service failed"))
            return None
        log.info("media.transcribed", name=a.name, bytes=size, chars=len(words))
        return words or "(no speech heard)"

    # -- images -----------------------------------------------------------------------------

    async def _images(self, events: list[MessageEvent]) -> tuple[str, ...]:
        s, urls = self.settings, list[str]()
        for event in events:
            for a in event.attachments:
                if len(urls) >= s.max_images:
                    return tuple(urls)
                if not (a.kind == "image" or a.mime_type.startswith("image/")):
                    continue
                if a.size > s.max_image_bytes:
                    continue  # announced too big: it stays a line, vision_analyze may still try
                try:
                    path = await self._fetch(event.platform, a)
                    data = await asyncio.to_thread(_read_capped, path, s.max_image_bytes)
                except (AdapterError, OSError) as exc:
                    log.warning("media.image_unavailable", name=a.name, error=str(exc))
                    continue
                if data is not None:
                    urls.append(_data_url(data, a))
        return tuple(urls)

    async def _fetch(self, platform: str, a: Attachment) -> Path:
        if a.path:
            return Path(a.path)
        download: Download | None = getattr(self.adapters.get(platform), "download", None)
        if download is None:
            raise OSError(f"attachments from {platform} cannot be fetched")
        return await download(a)


def _what(a: Attachment) -> str:
    return "voice note" if a.kind == "voice" else "audio file"


def _too_big(s: MediaSettings) -> str:
    mb = s.max_audio_bytes / (1024 * 1024)
    return f"it is longer than {s.max_audio_seconds:g} s or larger than {mb:g} MB"


def _swap_line(text: str, a: Attachment, line: str) -> str:
    """``text`` with the adapter's line for ``a`` (``[attached voice: name...]``) replaced by
    ``line``; appended when the adapter wrote none."""
    mark = f"[attached {a.kind}: {a.name}"
    lines = text.split("\n")
    for i, old in enumerate(lines):
        if old.startswith(mark):
            lines[i] = line
            return "\n".join(lines)
    return f"{text}\n\n{line}" if text.strip() else line


def _read_capped(path: Path, limit: int) -> bytes | None:
    with path.open("rb") as f:
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


def _data_url(data: bytes, a: Attachment) -> str:
    mime = a.mime_type if a.mime_type.startswith("image/") else ""
    mime = mime or mimetypes.guess_type(a.name)[0] or _sniff(data)
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _sniff(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"GIF8"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/jpeg"
