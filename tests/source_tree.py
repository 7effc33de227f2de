"""The project's own source files parsed for the tests that check its structure (layers,
composition, one definition of a thing): each file parsed once per test process."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

_ATTEMPTS = 3


@functools.cache
def parse(path: Path) -> ast.Module:
    """``path``'s syntax tree, shared between tests: they only read it."""
    return parse_text(path.read_text(), str(path))


def parse_text(source: str, filename: str = "<unknown>") -> ast.Module:
    # CPython 3.11 keeps the AST constructor's recursion depth in state shared by every thread
    # and may raise a spurious SystemError ("recursion depth mismatch") when another thread
    # (a library's, left running by an earlier test) compiles at the same moment. The parse
    # itself is deterministic: a retry gives the real tree, or the real error.
    for attempt in range(_ATTEMPTS):
        try:
            return ast.parse(source, filename=filename)
        except SystemError:
            if attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
