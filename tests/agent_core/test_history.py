"""`repair`: a history always goes to the API with every tool call answered, in order."""

from __future__ import annotations

import copy
import json
from typing import Any

from agent_core.history import INTERRUPTED_RESULT, repair, synthetic_results

Message = dict[str, Any]


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def calls(*ids: str) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str, content: str = "ok") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def answer(text: str) -> Message:
    return {"role": "assistant", "content": text}


def synthetic(call_id: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": INTERRUPTED_RESULT}


class TestRepair:
    def test_valid_history_is_unchanged(self) -> None:
        history = [
            user("read a and b"),
            calls("c1", "c2"),
            result("c1"),
            result("c2"),
            answer("done"),
            user("thanks"),
            answer("welcome"),
        ]
        before = copy.deepcopy(history)
        assert repair(history) == before
        assert history == before  # the input is not mutated

    def test_empty(self) -> None:
        assert repair([]) == []

    def test_dangling_calls_at_the_end_get_synthetic_results_in_order(self) -> None:
        history = [user("go"), calls("c1", "c2", "c3"), result("c2")]
        assert repair(history) == [
            user("go"),
            calls("c1", "c2", "c3"),
            result("c2"),
            synthetic("c1"),
            synthetic("c3"),
        ]

    def test_dangling_calls_before_the_next_message_are_answered_first(self) -> None:
        history = [user("go"), calls("c1", "c2"), user("stop!"), answer("stopped")]
        assert repair(history) == [
            user("go"),
            calls("c1", "c2"),
            synthetic("c1"),
            synthetic("c2"),
            user("stop!"),
            answer("stopped"),
        ]

    def test_orphan_tool_results_are_dropped(self) -> None:
        history = [
            result("ghost"),
            user("hi"),
            calls("c1"),
            result("c1"),
            result("c1", "duplicate"),
            result("other"),
            answer("done"),
        ]
        assert repair(history) == [user("hi"), calls("c1"), result("c1"), answer("done")]

    def test_result_after_an_intervening_message_is_an_orphan(self) -> None:
        history = [calls("c1"), user("interjection"), result("c1")]
        assert repair(history) == [calls("c1"), synthetic("c1"), user("interjection")]

    def test_out_of_order_results_are_kept_as_sent(self) -> None:
        history = [calls("c1", "c2"), result("c2"), result("c1"), answer("ok")]
        assert repair(history) == history

    def test_calls_without_ids_are_not_answered(self) -> None:
        broken = {"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}
        assert repair([broken, answer("x")]) == [broken, answer("x")]

    def test_assistant_with_empty_tool_calls(self) -> None:
        msg = {"role": "assistant", "content": "hi", "tool_calls": []}
        assert repair([msg, result("c1")]) == [msg]

    def test_consecutive_call_rounds(self) -> None:
        history = [calls("a1"), calls("b1"), result("b1")]
        assert repair(history) == [calls("a1"), synthetic("a1"), calls("b1"), result("b1")]

    def test_synthetic_results_custom_content(self) -> None:
        assert synthetic_results(["x", "y"], "gone") == [
            {"role": "tool", "tool_call_id": "x", "content": "gone"},
            {"role": "tool", "tool_call_id": "y", "content": "gone"},
        ]


def test_history_keeps_each_message_encoded_once() -> None:
    from agent_core.history import History, encode

    h = History([{"role": "user", "content": "héllo"}, {"role": "tool", "tool_call_id": "x"}])
    assert h.messages == [{"role": "user", "content": "héllo"}]  # repaired on the way in
    h.extend([{"role": "assistant", "content": "hi"}])
    assert h.encoded == [encode(m) for m in h.messages]
    assert json.loads(b"[" + b",".join(h.encoded) + b"]") == h.messages
    snap = h.snapshot()
    h.extend([{"role": "user", "content": "later"}])
    assert len(snap) == 2 and len(h) == 3  # a running turn's copy does not move
