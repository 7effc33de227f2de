"""What a model call returns: `Completion` (from a plain answer or folded from SSE chunks), and
`ModelError` carrying the text the user is shown, from the provider's status and words."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_core.backoff import retry_after_s

if TYPE_CHECKING:
    from collections.abc import Callable

    import openai

_DETAIL_READ = 4096
_DETAIL_CHARS = 200


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
    first_token_at: float | None = None  # a stream's first content or tool call (monotonic)


class ModelError(Exception):
    """The model call failed for good; `user_message` is what the user is told, `kind` how
    it failed in a word (``unreachable``, ``timeout``, ``http_<status>``, ``bad_response``)."""

    def __init__(
        self,
        user_message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        kind: str = "",
    ) -> None:
        super().__init__(user_message)
        self.user_message = user_message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.kind = kind or (f"http_{status}" if status is not None else "bad_response")


class Accumulator:
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
            if self.out.first_token_at is None and (content or delta.get("tool_calls")):
                self.out.first_token_at = time.monotonic()
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


def from_body(body: Any) -> Completion:
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


def status_error(
    exc: openai.APIStatusError, api_key: str = "", redact: Callable[[str], str] | None = None
) -> ModelError:
    """`redact` masks secrets and token-shaped strings in the provider's words (the gateway
    passes its log redactor)."""
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
        detail = _error_detail(exc, api_key, redact)
        err = ModelError(f"The model refused the request (HTTP {status}){detail}.", status=status)
    err.retry_after = _retry_after(exc)
    return err


def _error_detail(
    exc: openai.APIStatusError, api_key: str = "", redact: Callable[[str], str] | None = None
) -> str:
    """The provider's own words, which the user is shown: never with our key or any other secret
    in them (a provider or proxy may echo what it was sent), and short."""
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if isinstance(message, str) and message:
            message = message[:_DETAIL_READ]  # bounds what the redactor reads
            if api_key:
                message = message.replace(api_key, "***")
            if redact is not None:
                message = redact(message)
            return f": {_cut(message, _DETAIL_CHARS)}"
    return ""


def _cut(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a space when there is one."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ", limit // 2)
    return (head[:space] if space > 0 else head) + "…"


def _retry_after(exc: openai.APIStatusError) -> float | None:
    headers = exc.response.headers if exc.response is not None else None
    value = headers.get("retry-after") if headers else None
    return None if value is None else retry_after_s(value, cap=60.0)
