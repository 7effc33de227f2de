"""A route's prompt template: text with ``{field.path}`` placeholders filled from the payload's
JSON fields, each value and the whole prompt cut to a length. Substitution only: no
expressions, filters or calls, so a template (or a payload) can run nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# a placeholder: `@name` (what the request says besides its payload) or a dotted path of
# object keys and list indices; `{{` and `}}` are literal braces
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_PATH = re.compile(r"^(@[a-z]+|[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*)$")
SPECIALS = ("@route", "@event", "@delivery", "@payload")
CUT = "…"


class TemplateError(ValueError):
    """The template cannot be parsed (an unclosed brace, a bad placeholder)."""


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and placeholders, alternating."""

    pieces: tuple[str | tuple[str, ...], ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        pieces: list[str | tuple[str, ...]] = []
        at = 0
        for found in _TOKEN.finditer(text):
            pieces.append(text[at : found.start()])
            at = found.end()
            token = found.group(0)
            if token in ("{{", "}}"):
                pieces.append(token[0])
            elif token in ("{", "}"):
                raise TemplateError(f"unmatched {token!r} at {found.start()} (write {token * 2})")
            else:
                pieces.append(_placeholder(found.group(1).strip(), found.start()))
        pieces.append(text[at:])
        return cls(tuple(p for p in pieces if p != ""))

    def render(
        self, payload: Any, extra: Mapping[str, str], field_chars: int, prompt_chars: int
    ) -> str:
        """The prompt: each placeholder's value (a string as it is, anything else as compact
        JSON, a missing field as "") cut to ``field_chars``, the whole to ``prompt_chars``."""
        out: list[str] = []
        size = 0
        for piece in self.pieces:
            if isinstance(piece, str):
                text = piece
            else:
                text = cut(_value(piece, payload, extra, field_chars), field_chars)
            out.append(text)
            size += len(text)
            if size > prompt_chars:
                break
        return cut("".join(out), prompt_chars)


def _placeholder(path: str, where: int) -> tuple[str, ...]:
    if not _PATH.match(path):
        raise TemplateError(f"bad placeholder {{{path}}} at {where}: use {{field.path}}")
    if path.startswith("@") and path not in SPECIALS:
        raise TemplateError(f"unknown placeholder {{{path}}}: one of {', '.join(SPECIALS)}")
    return tuple(path.split("."))


def _value(path: tuple[str, ...], payload: Any, extra: Mapping[str, str], limit: int) -> str:
    if path[0] == "@payload":
        found: Any = payload
    elif path[0].startswith("@"):
        return extra.get(path[0], "")
    else:
        found = lookup(payload, path)
    if found is None:
        return ""
    if isinstance(found, str):
        return found
    # the body is bounded (control.max_webhook_body_bytes), so encoding a subtree is too
    return json.dumps(found, ensure_ascii=False, separators=(",", ":"))[: limit + 1]


def lookup(payload: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (object keys, list indices), or None when there is none."""
    found = payload
    for step in path:
        if isinstance(found, dict):
            found = found.get(step)
        elif isinstance(found, list) and step.isdigit() and int(step) < len(found):
            found = found[int(step)]
        else:
            return None
    return found


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + CUT
