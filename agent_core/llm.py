"""One long-lived OpenAI-compatible client per provider, with retries and interruptible streams.

Building a client (TLS context, connection pool) per request is what made the reference gateway
CPU-bound; here one `LLMClient` serves every agent and keeps its connections alive.
"""

from __future__ import annotations

import ipaddress
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    import httpx
    import openai

import structlog

from agent_core.history import encode

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
        self._tools_cache: tuple[list[dict[str, Any]], bytes] | None = None
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
        prefix: Sequence[bytes] = (),
        should_stop: Callable[[], bool] = lambda: False,
        on_delta: Callable[[str], None] | None = None,
        wait: Callable[[float], bool] | None = None,
    ) -> Completion:
        """One assistant turn, retried on 429/5xx/timeouts; raises `ModelError` at the end.

        ``prefix`` holds messages already encoded as JSON (`agent_core.history.encode`) that
        go before ``messages``: the system prompt and the history, encoded once, not per call.
        """
        body = self._body(prefix, messages, tools)
        attempt = 0
        while True:
            try:
                return self._complete_once(body, should_stop, on_delta)
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

    def _body(
        self, prefix: Sequence[bytes], messages: list[Message], tools: list[dict[str, Any]] | None
    ) -> bytes:
        """The request body as bytes, spliced from encoded parts (see `complete`)."""
        extra: dict[str, Any] = {"model": self.settings.model}
        if self.settings.temperature is not None:
            extra["temperature"] = self.settings.temperature
        if self.settings.stream:
            extra["stream"] = True
            extra["stream_options"] = {"include_usage": True}
        parts = [*prefix, *(encode(m) for m in messages)]
        body = b'{"messages":[' + b",".join(parts) + b"]," + encode(extra)[1:]
        if tools:
            body = body[:-1] + b',"tools":' + self._tools_json(tools) + b"}"
        return body

    def _tools_json(self, tools: list[dict[str, Any]]) -> bytes:
        # the registry hands out the same list every call: encode it once
        if self._tools_cache is None or self._tools_cache[0] is not tools:
            self._tools_cache = (tools, encode(tools))
        return self._tools_cache[1]

    def _complete_once(
        self,
        body: bytes,
        should_stop: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
    ) -> Completion:
        import httpx
        import openai

        try:
            if self.settings.stream:
                return self._stream(body, should_stop, on_delta)
            return self._plain(body)
        except openai.APIStatusError as exc:
            raise _status_error(exc, self.settings.api_key) from exc
        # httpx errors: raised while reading a stream, where the SDK no longer wraps them
        except (openai.APITimeoutError, httpx.TimeoutException) as exc:
            raise self._timed_out() from exc
        except (openai.APIConnectionError, httpx.TransportError) as exc:
            raise ModelError(
                "The model endpoint could not be reached; try again shortly.", retryable=True
            ) from exc
        # a body of the wrong shape ({"choices": 7}) fails wherever it is first read
        except (
            openai.APIResponseValidationError,
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            IndexError,
        ) as exc:
            raise ModelError("The model sent a response I could not read.") from exc

    def _timed_out(self) -> ModelError:
        return ModelError(
            f"The model did not answer within {self.settings.timeout_s:g} s; try again shortly.",
            retryable=True,
        )

    def _post(self, body: bytes) -> httpx.Response:
        """POST the body as built and hand back the raw streaming response.

        `chat.completions.create` would first run the SDK's request transform over every
        history message, about 0.1 ms each per call (75 ms at 400 messages), for nothing: our
        messages are already plain JSON. And the SDK's `Stream` stops reading at ``[DONE]``
        and closes the response, so no connection is ever reused (on a real endpoint, a TLS
        handshake per call). The SDK still does the transport, auth, retries-off and the
        mapping of HTTP errors to its exceptions; we only parse the body.
        """
        import httpx

        response: httpx.Response = self._sdk().post(
            "/chat/completions",
            content=body,
            cast_to=httpx.Response,
            stream=True,
            options={"headers": {"Content-Type": "application/json"}},
        )
        return response

    def _plain(self, body: bytes) -> Completion:
        response = self._post(body)
        try:
            body = json.loads(response.read())
        finally:
            response.close()
        return _from_body(body)

    def _stream(
        self,
        body: bytes,
        should_stop: Callable[[], bool],
        on_delta: Callable[[str], None] | None,
    ) -> Completion:
        # the SDK's timeout bounds each read, not the request: a trickle would never end
        deadline = time.monotonic() + self.settings.timeout_s
        acc = _Accumulator(on_delta)
        response = self._post(body)
        try:
            for line in response.iter_lines():
                # read on past [DONE] to the end of the body, so the connection is reused
                if not line.startswith("data:") or line.endswith("[DONE]"):
                    continue
                if should_stop():
                    acc.out.interrupted = True
                    break
                if time.monotonic() > deadline:
                    raise self._timed_out()
                acc.add(json.loads(line[5:]))
        finally:
            response.close()
        return acc.finish()


class _Accumulator:
    """Folds SSE chunks (plain dicts) into one `Completion`."""

    def __init__(self, on_delta: Callable[[str], None] | None) -> None:
        self.out = Completion()
        self.parts: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.on_delta = on_delta

    def add(self, chunk: dict[str, Any]) -> None:
        if chunk.get("error"):
            detail = str((chunk["error"] or {}).get("message", ""))[:200]
            raise ModelError(f"The model reported an error: {detail}", retryable=True)
        if chunk.get("usage"):
            self.out.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                self.parts.append(content)
                if self.on_delta is not None:
                    self.on_delta(content)
            for tc in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "args": []})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                function = tc.get("function") or {}
                slot["name"] += function.get("name") or ""
                slot["args"].append(function.get("arguments") or "")
            if choice.get("finish_reason"):
                self.out.finish_reason = choice["finish_reason"]

    def finish(self) -> Completion:
        out = self.out
        out.content = "".join(self.parts)
        out.tool_calls = [
            ToolCall(c["id"] or f"call_{i}", c["name"], "".join(c["args"]))
            for i, c in sorted(self.calls.items())
        ]
        if not out.interrupted and not out.finish_reason and not out.content and not self.calls:
            raise ModelError("The model sent an empty response.", retryable=True)
        return out


def _from_body(body: Any) -> Completion:
    choices = body.get("choices") if isinstance(body, dict) else None
    if not choices:
        raise ModelError("The model sent an empty response.", retryable=True)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ModelError("The model sent a response I could not read.")
    calls = [
        ToolCall(tc["id"], tc["function"]["name"], tc["function"].get("arguments") or "")
        for tc in message.get("tool_calls") or ()
        if tc.get("function")
    ]
    return Completion(
        content=message.get("content") or "",
        tool_calls=calls,
        finish_reason=choices[0].get("finish_reason") or "",
        usage=_usage(body["usage"]) if body.get("usage") else {},
    )


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    return {
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "completion_tokens": int(usage.get("completion_tokens") or 0),
    }


def _status_error(exc: openai.APIStatusError, api_key: str = "") -> ModelError:
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
        detail = _error_detail(exc, api_key)
        err = ModelError(f"The model refused the request (HTTP {status}){detail}.", status=status)
    err.retry_after = _retry_after(exc)
    return err


def _error_detail(exc: openai.APIStatusError, api_key: str = "") -> str:
    """The provider's own words, which the user is shown: never with our key in them (a
    provider or proxy may echo the key it was sent; issue 9)."""
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if isinstance(message, str) and message:
            if api_key:
                message = message.replace(api_key, "***")
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
