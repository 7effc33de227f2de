"""An audio file's length read from its own header, for files whose platform announced none: WAV
(RIFF) and Ogg Opus; anything else is 0, unknown (its size still bounds it)."""

from __future__ import annotations

import wave
from pathlib import Path

OPUS_RATE = 48_000  # an Ogg Opus stream's granule positions count 48 kHz samples
TAIL = 65_536  # the last Ogg page is in the file's last 64 KB (a page is at most ~64 KB)


def audio_seconds(path: Path) -> float:
    """Seconds of audio in ``path``, or 0.0 when its format is not one read here. Blocking."""
    with path.open("rb") as f:
        head = f.read(64)
        if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
            f.seek(0)
            try:
                with wave.open(f) as w:
                    rate = w.getframerate()
                    return w.getnframes() / rate if rate else 0.0
            except (wave.Error, EOFError):
                return 0.0
        if head.startswith(b"OggS") and b"OpusHead" in head:
            size = f.seek(0, 2)
            f.seek(max(0, size - TAIL))
            tail = f.read()
            at = tail.rfind(b"OggS")
            if at < 0 or len(tail) < at + 14:
                return 0.0
            granule = int.from_bytes(tail[at + 6 : at + 14], "little", signed=True)
            return max(granule, 0) / OPUS_RATE
    return 0.0
