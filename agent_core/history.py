"""Keeps a message list valid for the chat completions API: every tool call answered, in order."""

from __future__ import annotations

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
