"""The system prompt: built once per session and kept byte-stable so provider caches stay warm."""

from __future__ import annotations

from collections.abc import Sequence

_BASE = (
    "You are Hermes, a capable assistant reached through a chat gateway. "
    "Answer concisely and use Markdown sparingly (chat clients render it unevenly)."
)


def build_system_prompt(custom: str, tool_names: Sequence[str], extra: Sequence[str] = ()) -> str:
    """Nothing here may change between turns of a session: no clock, no counters."""
    parts = [custom.strip() or _BASE]
    if tool_names:
        parts.append(
            "You can call these tools: " + ", ".join(sorted(tool_names)) + ". "
            "File paths are relative to the workspace. When a tool returns an error, read it "
            "and try again with corrected arguments or explain the problem."
        )
    parts.extend(p.strip() for p in extra if p.strip())
    return "\n\n".join(parts)
