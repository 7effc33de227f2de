"""The bounded JSON parser: nesting is counted on the bytes (brackets inside strings are text),
and whatever it refuses is a RequestError 4xx, never a RecursionError."""

from __future__ import annotations

import json

import pytest

from hermes_gateway.errors import RequestError
from hermes_gateway.text.jsonbody import MAX_DEPTH, loads, nesting_over


def nested(depth: int, inner: str = "1") -> bytes:
    text = inner
    for n in range(depth):
        text = f"[{text}]" if n % 2 else f'{{"k": {text}}}'
    return text.encode()


@pytest.mark.parametrize("depth", [1, 2, MAX_DEPTH - 1, MAX_DEPTH])
def test_up_to_the_limit_parses(depth: int) -> None:
    assert loads(nested(depth)) == json.loads(nested(depth))
    assert not nesting_over(nested(depth))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 100_000])
def test_past_the_limit_is_a_400(depth: int) -> None:
    with pytest.raises(RequestError) as refused:
        loads(nested(depth))
    assert (refused.value.status, refused.value.code) == (400, "invalid_json")


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 200_000,  # unclosed: Slack's signed body of brackets
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' * 50_000 + b"1" + b"}" * 50_000,
        b"[" * 70 + b"}" * 70,  # unpaired
    ],
)
def test_bracket_bombs_are_refused_without_recursion(body: bytes) -> None:
    with pytest.raises(RequestError) as refused:
        loads(body)
    assert refused.value.status == 400


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = "[[[{{{" * 1000 + '\\"]]' + "}}}" * 500
    body = json.dumps({"messages": [{"content": text}], "q": 'a "quoted" [x]'}).encode()
    assert not nesting_over(body)
    assert loads(body)["messages"][0]["content"] == text


def test_many_shallow_containers_are_fine() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": [{"t": [1]}]}] * 5000}).encode()
    assert len(loads(body)["messages"]) == 5000


@pytest.mark.parametrize(
    "body", [b"", b"{", b'{"a": 1', b"\xff\xfe", b'{"n": ' + b"7" * 5000 + b"}", b"nul"]
)
def test_not_json_is_a_400(body: bytes) -> None:
    with pytest.raises(RequestError) as refused:
        loads(body)
    assert (refused.value.status, refused.value.code) == (400, "invalid_json")


def test_over_the_size_is_a_413() -> None:
    with pytest.raises(RequestError) as refused:
        loads(b"[" + b"1," * 600 + b"1]", max_bytes=1000)
    assert refused.value.status == 413


def test_text_is_parsed_as_its_utf8() -> None:
    assert loads('{"a": "é [x]"}') == {"a": "é [x]"}
