"""Media the user sends, made into what the model reads: voice notes transcribed to text, images
as image parts of the turn (see docs/media-in.md)."""

from hermes_gateway.media_in.prepare import InboundMedia, MediaSettings, TurnInput
from hermes_gateway.media_in.transcriber import Transcriber, TranscriptionSettings

__all__ = ["InboundMedia", "MediaSettings", "Transcriber", "TranscriptionSettings", "TurnInput"]
