"""One long-lived OpenAI-compatible client per provider, with retries and interruptible streams.

Building a client (TLS context, connection pool) per request is what made the reference gateway
CPU-bound; here one `LLMClient` serves every agent and keeps its connections alive.
"""

from __future__ import annotations

import ipaddress
import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    import openai

import structlog

Message = dict[str, Any]
log = structlog.get_logger("hermes.llm")


@dataclass(frozen=True, slots=True)
class LLMSettings:
    base_url: str
    api_key: str
    model: str
    timeout_s: float = 120.0
    max_retries: int = 2
    stream: bool = True
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class Completion:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False


class ModelError(Exception):
    """The model call failed for good; `user_message` is what the user is told."""

    def __init__(
        self,
        user_message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(user_message)
        self.user_message = user_message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after


class LLMClient:
    """Chat completions against one provider; safe to share across threads."""

    def __init__(self, settings: LLMSettings, *, wait: Callable[[float], bool] | None = None):
        self.settings = settings
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()
        # `wait(seconds)` sleeps between retries and returns True if the run was interrupted
        self._wait = wait

    @property
    def configured(self) -> bool:
        """A hosted API needs a key; a local server (loopback or private address) may not."""
        return bool(self.settings.api_key) or _is_local(self.settings.base_url)

    def warm(self) -> None:
        """Import the SDK and build the client ahead of the first message (blocking)."""
        self._sdk()

    def _sdk(self) -> openai.OpenAI:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    # imported here: it is the biggest import of the daemon (about 0.6 s), and
                    # /healthz should not wait for it
                    import openai

                    self._client = openai.OpenAI(
                        base_url=self.settings.base_url,
                        api_key=self.settings.api_key or "no-key",
                        timeout=self.settings.timeout_s,
                        max_retries=0,  # our own retry loop honours interrupts
                    )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        on_delta: Callable[[str], None] | None = None,
        wait: Callable[[float], bool] | None = None,
    ) -> Completion:
        """One assistant turn, retried on 429/5xx/timeouts; raises `ModelError` at the end."""
        attempt = 0
        while True:
            try:
                return self._complete_once(messages, tools, should_stop, on_delta)
            except ModelError as exc:
                if not exc.retryable or attempt >= self.settings.max_retries:
                    log.warning(
                        "model.failed", status=exc.status, error=str(exc), attempts=attempt + 1
                    )
                    raise
                delay = exc.retry_after if exc.retry_after is not None else _backoff(attempt)
                attempt += 1
                log.warning(
                    "model.retry", status=exc.status, attempt=attempt, delay_s=round(delay, 2)
                )
                sleeper = wait or self._wait or _sleep
                if sleeper(delay) or should_stop():
                    return Completion(interrupted=True)

    def _complete_once(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        should_stop: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
    ) -> Completion:
        import openai

        kwargs: dict[str, Any] = {"model": self.settings.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        try:
            if self.settings.stream:
                return self._stream(kwargs, should_stop, on_delta)
            return _from_response(self._post(kwargs, stream=False))
        except openai.APIStatusError as exc:
            raise _status_error(exc) from exc
        except openai.APITimeoutError as exc:
            raise ModelError(
                f"The model did not answer within {self.settings.timeout_s:g} s; "
                "try again shortly.",
                retryable=True,
            ) from exc
        except openai.APIConnectionError as exc:
            raise ModelError(
                "The model endpoint could not be reached; try again shortly.", retryable=True
            ) from exc
        except (openai.APIResponseValidationError, json.JSONDecodeError, KeyError) as exc:
            raise ModelError("The model sent a response I could not read.") from exc

    def _post(self, body: dict[str, Any], *, stream: bool) -> Any:
        """POST the body as built: `chat.completions.create` would first run the SDK's
        request transform over every history message, about 0.1 ms each per call (75 ms at
        400 messages), for nothing: our messages are already plain JSON. Transport, auth,
        errors and response parsing are still the SDK's."""
        from openai import Stream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        return self._sdk().post(
            "/chat/completions",
            body=body,
            cast_to=ChatCompletion,
            stream=stream,
            stream_cls=Stream[ChatCompletionChunk],
        )

    def _stream(
        self,
        kwargs: dict[str, Any],
        should_stop: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
    ) -> Completion:
        out = Completion()
        parts: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
        stream = self._post(kwargs, stream=True)
        with stream:
            for chunk in stream:
                if should_stop():
                    out.interrupted = True
                    break
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    out.usage = _usage(usage)
                for choice in chunk.choices or ():
                    delta = choice.delta
                    if delta is not None and delta.content:
                        parts.append(delta.content)
                        if on_delta is not None:
                            on_delta(delta.content)
                    for tc in (delta.tool_calls if delta is not None else None) or ():
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "args": []})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function is not None:
                            slot["name"] += tc.function.name or ""
                            slot["args"].append(tc.function.arguments or "")
                    if choice.finish_reason:
                        out.finish_reason = choice.finish_reason
        out.content = "".join(parts)
        out.tool_calls = [
            ToolCall(c["id"] or f"call_{i}", c["name"], "".join(c["args"]))
            for i, c in sorted(calls.items())
        ]
        if not out.interrupted and not out.finish_reason and not out.content and not calls:
            raise ModelError("The model sent an empty response.", retryable=True)
        return out


def _from_response(response: Any) -> Completion:
    choices = getattr(response, "choices", None)
    if not choices:
        raise ModelError("The model sent an empty response.", retryable=True)
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise ModelError("The model sent a response I could not read.")
    calls = [
        ToolCall(tc.id, tc.function.name, tc.function.arguments or "")
        for tc in (getattr(message, "tool_calls", None) or ())
        if getattr(tc, "function", None) is not None
    ]
    usage = getattr(response, "usage", None)
    return Completion(
        content=message.content or "",
        tool_calls=calls,
        finish_reason=choice.finish_reason or "",
        usage=_usage(usage) if usage is not None else {},
    )


def _usage(usage: Any) -> dict[str, int]:
    return {
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
    }


def _status_error(exc: openai.APIStatusError) -> ModelError:
    status = exc.status_code
    if status == 401 or status == 403:
        err = ModelError(
            f"The model provider rejected the API key (HTTP {status}); "
            "check model.api_key or OPENAI_API_KEY.",
            status=status,
        )
    elif status == 404:
        err = ModelError(
            "The model endpoint answered HTTP 404; check model.name and model.base_url.",
            status=status,
        )
    elif status == 429:
        err = ModelError(
            "The model is rate-limited (HTTP 429); try again shortly.",
            status=status,
            retryable=True,
        )
    elif status >= 500:
        err = ModelError(
            f"The model is unavailable (HTTP {status}); try again shortly.",
            status=status,
            retryable=True,
        )
    else:
        detail = _error_detail(exc)
        err = ModelError(f"The model refused the request (HTTP {status}){detail}.", status=status)
    err.retry_after = _retry_after(exc)
    return err


def _error_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if isinstance(message, str) and message:
            return f": {message[:200]}"
    return ""


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return min(max(float(value), 0.0), 60.0) if value is not None else None
    except ValueError:
        return None


def _backoff(attempt: int) -> float:
    return float(min(8.0, 0.5 * 2**attempt) * (0.5 + random.random()))


def _sleep(seconds: float) -> bool:
    threading.Event().wait(seconds)
    return False


def _is_local(base_url: str) -> bool:
    host = urlparse(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return addr.is_loopback or addr.is_private or addr.is_link_local
