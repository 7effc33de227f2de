"""Keeps a message list valid for the chat completions API: every tool call answered, in order."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

Message = dict[str, Any]

INTERRUPTED_RESULT = "Error: not run; the user interrupted this turn."


def repair(messages: list[Message]) -> list[Message]:
    """Return ``messages`` with dangling tool calls answered and orphan tool results dropped.

    History is written whole per turn, so this only matters after a crash mid-write or a
    hand-edited store; the API rejects an unpaired call outright, so it must never go out.
    """
    out: list[Message] = []
    open_calls: list[str] = []
    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
                out.append(msg)
            continue
        if open_calls:
            out.extend(synthetic_results(open_calls))
            open_calls = []
        out.append(msg)
        if role == "assistant":
            open_calls = [tc["id"] for tc in msg.get("tool_calls") or () if tc.get("id")]
    if open_calls:
        out.extend(synthetic_results(open_calls))
    return out


def synthetic_results(call_ids: list[str], content: str = INTERRUPTED_RESULT) -> list[Message]:
    return [{"role": "tool", "tool_call_id": cid, "content": content} for cid in call_ids]


def encode(message: Any) -> bytes:
    """A message (or any JSON value) as the request carries it: compact UTF-8."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


class History:
    """A session's messages with each one's JSON kept beside it.

    A long conversation is sent whole on every model call; encoding it once per message
    instead of once per call keeps a call's cost flat as the history grows. Messages must not
    be changed after they are added (the runner only ever appends whole, valid turns).
    """

    __slots__ = ("encoded", "messages")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self.messages: list[Message] = repair(list(messages))
        self.encoded: list[bytes] = [encode(m) for m in self.messages]

    def extend(self, messages: Iterable[Message]) -> None:
        for message in messages:
            self.messages.append(message)
            self.encoded.append(encode(message))

    def snapshot(self) -> History:
        """A copy that later appends do not change (a run reads it on another thread)."""
        copy = History.__new__(History)
        copy.messages = list(self.messages)
        copy.encoded = list(self.encoded)
        return copy

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)
