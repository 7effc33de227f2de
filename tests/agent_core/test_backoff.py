"""`agent_core.backoff`: the one `Retry-After` reader (seconds or an HTTP date, in whatever
shape a client hands the header) and the one `Backoff`, used by the model client and every
platform; no other module defines its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent_core.backoff import Backoff, header, retry_after_s
from tests.source_tree import parse

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 2.5 ", 2.5),
        (3, 3.0),
        (["4", "9"], 4.0),  # a header list: its first value
        ("Fri, 15 Jan 2027 08:00:30 GMT", 30.0),  # an HTTP date, 30 s from now
        ("Fri, 15 Jan 2027 07:59:00 GMT", 0.0),  # in the past: no wait, never negative
        ("-5", 0.0),
        (None, 1.0),  # missing: the default
        ("soon", 1.0),  # unreadable: the default
        ("nan", 1.0),
        ("inf", 1.0),
        ([], 1.0),
        (True, 1.0),
    ],
)
def test_a_retry_after_value_is_read_as_seconds(value: object, seconds: float) -> None:
    assert retry_after_s(value, now=lambda: NOW) == pytest.approx(seconds)


def test_the_cap_and_the_default_are_the_callers() -> None:
    assert retry_after_s("3600", cap=60.0) == 60.0
    assert retry_after_s("junk", default=0.25) == 0.25


def test_a_header_is_found_whatever_the_case_of_its_name() -> None:
    assert header({"retry-after": "3"}) == "3"
    assert header({"RETRY-AFTER": ["5"]}) == ["5"]
    assert header({"Content-Type": "x"}) is None
    assert header(None) is None


def test_backoff_grows_by_its_factor_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.5, 3.0, factor=2.0, jitter=0.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5
    spread = Backoff(1.0, 10.0, jitter=0.5, rng=lambda low, high: high)
    assert spread.next() == 1.5


def _defined(name_matches: str) -> list[str]:
    found = []
    for package in ("hermes_gateway", "adapters", "agent_core", "tools"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(parse(path)):
                if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name_matches:
                    found.append(str(path.relative_to(ROOT)))
    return found


def test_there_is_one_backoff_and_one_retry_after_reader() -> None:
    assert _defined("Backoff") == ["agent_core/backoff.py"]
    # the Telegram shim's reads PTB's exception, not a header
    assert sorted(_defined("retry_after_s")) == ["adapters/shims/ptb.py", "agent_core/backoff.py"]
    assert _defined("_backoff") == []
