"""The embeddings client: an OpenAI-compatible `/v1/embeddings` through the `openai` SDK, batched,
retried like chat calls (429, 5xx, timeouts, unreachable), each vector a float32 unit vector.

Blocking: the archive calls it with `asyncio.to_thread`, never on the event loop.
"""

from __future__ import annotations

import math
import time
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agent_core.completion import ModelError, status_error
from agent_core.llm import LazyClient

if TYPE_CHECKING:
    pass

log = structlog.get_logger("hermes.memory")


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    base_url: str
    api_key: str
    model: str
    batch_size: int = 64
    timeout_s: float = 30.0
    max_retries: int = 2


class Embedder:
    """One client for the process; safe to share across threads."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.settings = settings
        # retries: our own loop, with the chat client's rules
        self._client = LazyClient(settings.base_url, settings.api_key, settings.timeout_s)

    @property
    def model(self) -> str:
        return self.settings.model

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: list[str]) -> list[bytes]:
        """Each text's unit vector as float32 bytes, in order; raises `ModelError`."""
        out: list[bytes] = []
        size = self.settings.batch_size
        for start in range(0, len(texts), size):
            out.extend(self._retried(texts[start : start + size]))
        return out

    def _retried(self, batch: list[str]) -> list[bytes]:
        attempt = 0
        while True:
            try:
                return self._once(batch)
            except ModelError as exc:
                if not exc.retryable or attempt >= self.settings.max_retries:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else 0.5 * 2**attempt
                attempt += 1
                log.info("embeddings.retry", status=exc.status, attempt=attempt, delay_s=delay)
                time.sleep(min(delay, 8.0))

    def _once(self, batch: list[str]) -> list[bytes]:
        import openai

        try:
            response = self._client.get().embeddings.create(
                model=self.settings.model, input=batch, encoding_format="float"
            )
            rows = sorted(response.data, key=lambda d: d.index)
            if len(rows) != len(batch):
                raise ValueError(f"{len(rows)} vectors for {len(batch)} texts")
            return [pack(row.embedding) for row in rows]
        except openai.APIStatusError as exc:
            raise embeddings_error(status_error(exc, self.settings.api_key)) from exc
        except openai.APITimeoutError as exc:
            raise ModelError(
                f"The embeddings endpoint timed out ({self.settings.base_url}); check "
                f"{BASE_URL_KEYS}.",
                retryable=True,
            ) from exc
        except openai.APIConnectionError as exc:
            raise ModelError(
                f"The embeddings endpoint could not be reached ({self.settings.base_url}); "
                f"check {BASE_URL_KEYS}.",
                retryable=True,
            ) from exc
        except (openai.APIResponseValidationError, ValueError, TypeError, AttributeError) as exc:
            raise ModelError("The embeddings endpoint sent a response I could not read.") from exc


BASE_URL_KEYS = "memory.embeddings.base_url (empty: model.base_url)"
_KEY_KEYS = "memory.embeddings.api_key (empty: model.api_key, when both base URLs are the same)"


def embeddings_error(err: ModelError) -> ModelError:
    """The chat client's words for an HTTP status, about the embeddings endpoint: the keys to
    check are `memory.embeddings`'s (each empty one taken from `model`), not the chat model's."""
    status = err.status
    if status in (401, 403):
        text = f"The embeddings endpoint rejected the API key (HTTP {status}); check {_KEY_KEYS}."
    elif status == 404:
        text = (
            "The embeddings endpoint answered HTTP 404; check memory.embeddings.model and "
            f"{BASE_URL_KEYS}."
        )
    else:
        text = str(err).replace("The model", "The embeddings endpoint", 1)
    return ModelError(text, status=status, retryable=err.retryable, retry_after=err.retry_after)


def pack(vector: Any) -> bytes:
    """A unit vector as float32 bytes (so a dot product is the cosine)."""
    values = [float(v) for v in vector]
    if not values:
        raise ValueError("empty vector")
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return array("f", (v / norm for v in values)).tobytes()
