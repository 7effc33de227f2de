"""Builds the gateway's `InboundMedia` from the config: None when neither voice notes are
transcribed nor images shown to the model, so a turn's text is then taken as it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermes_gateway.config import Config
from hermes_gateway.media_in.prepare import InboundMedia, MediaSettings
from hermes_gateway.media_in.transcriber import Transcriber, TranscriptionSettings


def inbound_media(config: Config, adapters: Mapping[str, Any]) -> InboundMedia | None:
    t, m = config.media.transcription, config.model
    if not t.enabled and not m.vision:
        return None
    settings = MediaSettings(
        transcribe=t.enabled,
        max_audio_bytes=t.max_bytes,
        max_audio_seconds=t.max_seconds,
        vision=m.vision,
        max_images=m.vision_max_images,
        max_image_bytes=m.vision_max_bytes,
    )
    transcriber = None
    if t.enabled:  # empty keys are the chat model's, as for the embeddings endpoint
        transcriber = Transcriber(
            TranscriptionSettings(
                base_url=t.base_url or m.base_url,
                api_key=t.api_key or (m.api_key if not t.base_url else ""),
                model=t.model,
                timeout_s=t.timeout_s,
            )
        )
    return InboundMedia(settings, adapters, transcriber)
