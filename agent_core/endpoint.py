"""What the model endpoint did on its last real call (succeeded, or failed and how), kept by
the shared `LLMClient` so readiness and status can name the model's state without polling."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from agent_core.completion import ModelError


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One finished model call: ``at`` is wall-clock time; ``kind`` and ``error`` say how a
    failure failed (``unreachable``, ``timeout``, ``http_500``, ...; the user's message)."""

    ok: bool
    at: float
    kind: str = ""
    error: str = ""


class EndpointState:
    """The last outcome of a model call. Runs record it from worker threads while the event
    loop reads it, so it sits behind a lock; a reader gets a frozen value."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: CallOutcome | None = None

    def succeeded(self) -> None:
        with self._lock:
            self._last = CallOutcome(True, time.time())

    def failed(self, exc: ModelError) -> None:
        with self._lock:
            self._last = CallOutcome(False, time.time(), exc.kind, exc.user_message)

    @property
    def last(self) -> CallOutcome | None:
        """None until the first call has ended."""
        with self._lock:
            return self._last
