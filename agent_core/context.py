"""The context budget: estimate a request's tokens and, over `model.context_budget`, fold the
older turns of a session into one summary written by the model.

A compacted history is ``[summary, *kept]``: the system prompt before it is untouched (so the
prefix stays stable), and the kept part starts at a user message, so no tool call is ever
separated from its results. The store keeps the full log and, beside it, a marker message
(role `compaction`) holding the compacted history as JSON; loading a session takes the last
marker plus everything after it (`restore`), which is exactly what the agent saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agent_core.history import History
from agent_core.llm import LLMClient

Message = dict[str, Any]
COMPACTION_ROLE = "compaction"
SUMMARY_PREFIX = "[Summary of the earlier conversation, written when it grew too long]\n"
BYTES_PER_TOKEN = 4  # of compact JSON: errs high for English, which is the safe side
_PER_MESSAGE = 4  # tokens of framing each message costs
_ITEM_CHARS = 2000
_SUMMARIZER = (
    "You condense conversations. Write a hand-off summary of the conversation below for an "
    "assistant that will continue it without seeing it: the user's goals and preferences, "
    "decisions made and why, facts learned (names, paths, numbers, commands and their "
    "results), what was done, and what is still open. Quote exact values; keep details needed "
    "to continue; no preamble. If an earlier summary is included, fold it in."
)


def estimate_tokens(encoded: Iterable[bytes]) -> int:
    """Tokens of a request from its encoded messages (or any encoded parts)."""
    total = count = 0
    for part in encoded:
        total += len(part)
        count += 1
    return total // BYTES_PER_TOKEN + count * _PER_MESSAGE


@dataclass(slots=True)
class Compaction:
    """A session's new history and the marker that records it in the store (taken when it is
    made: the session appends to ``history`` afterwards)."""

    history: History
    summarized: int  # messages folded into the summary
    marker: Message = field(init=False)

    def __post_init__(self) -> None:
        self.marker = {"role": COMPACTION_ROLE, "content": json.dumps(self.history.messages)}


def split_point(history: History, keep_tokens: int) -> int:
    """Where the kept suffix starts: the earliest user message after which at most
    ``keep_tokens`` remain, or the end (everything is folded). 0 when nothing can be folded."""
    messages, encoded = history.messages, history.encoded
    if not messages:
        return 0
    tail = 0
    best = len(messages)
    for i in range(len(messages) - 1, 0, -1):
        tail += len(encoded[i]) // BYTES_PER_TOKEN + _PER_MESSAGE
        if tail > keep_tokens:
            break
        if messages[i].get("role") == "user" and not _is_summary(messages[i]):
            best = i
    already = 1 if _is_summary(messages[0]) else 0
    return best if best > already else 0


def compact(
    history: History,
    llm: LLMClient,
    *,
    keep_tokens: int,
    should_stop: Callable[[], bool] = lambda: False,
    max_chars: int = 200_000,
) -> Compaction | None:
    """Summarize what precedes `split_point`; None when there is nothing to fold or the run
    was interrupted. `ModelError` from the summarizing call propagates."""
    cut = split_point(history, keep_tokens)
    if cut == 0:
        return None
    old, kept = history.messages[:cut], history.messages[cut:]
    request = [
        {"role": "system", "content": _SUMMARIZER},
        {"role": "user", "content": transcript(old, max_chars)},
    ]
    completion = llm.complete(request, None, should_stop=should_stop)
    if completion.interrupted or should_stop() or not completion.content.strip():
        return None
    summary: Message = {"role": "user", "content": SUMMARY_PREFIX + completion.content.strip()}
    return Compaction(History([summary, *kept]), summarized=cut)


def transcript(messages: list[Message], max_chars: int) -> str:
    """The messages as plain text for the summarizer; the middle goes when it is too long (an
    earlier summary at the start is always kept)."""
    lines = [_render(m) for m in messages]
    total = sum(len(line) + 1 for line in lines)
    if total <= max_chars:
        return "\n".join(lines)
    head = lines[:1] if messages and _is_summary(messages[0]) else []
    budget = max_chars - sum(len(x) for x in head)
    tail: list[str] = []
    for line in reversed(lines[len(head) :]):
        budget -= len(line) + 1
        if budget < 0:
            break
        tail.append(line)
    omitted = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[... {omitted} earlier messages omitted ...]", *reversed(tail)])


def _render(message: Message) -> str:
    role = str(message.get("role", "?"))
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content) if content else ""
    if _is_summary(message):
        return f"EARLIER SUMMARY: {text[len(SUMMARY_PREFIX) :]}"
    if role == "tool":
        return f"TOOL RESULT: {_cut(text, _ITEM_CHARS // 2)}"
    parts = [f"{role.upper()}: {_cut(text, _ITEM_CHARS)}"] if text else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        args = _cut(str(function.get("arguments", "")), 300)
        parts.append(f"{role.upper()} CALLED {function.get('name', '?')}({args})")
    return "\n".join(parts) or f"{role.upper()}: (empty)"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more]"


def _is_summary(message: Message) -> bool:
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, str)
        and content.startswith(SUMMARY_PREFIX)
    )


def restore(messages: list[Message]) -> list[Message]:
    """A stored log as the model last saw it: the last compaction marker's history, then
    everything after the marker. A marker that cannot be read is skipped (the full log)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != COMPACTION_ROLE:
            continue
        try:
            prefix = json.loads(messages[i].get("content") or "")
        except ValueError:
            prefix = None
        rest = [m for m in messages[i + 1 :] if m.get("role") != COMPACTION_ROLE]
        if isinstance(prefix, list) and all(isinstance(m, dict) for m in prefix):
            return [*prefix, *rest]
        return [m for m in messages if m.get("role") != COMPACTION_ROLE]
    return messages
