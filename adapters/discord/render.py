"""Discord's rendering of the Markdown models write: Discord renders Markdown itself, so only
pipe tables (which it does not) become code blocks; split to its 2000-unit limit."""

from __future__ import annotations

from hermes_gateway.platforms import (
    FENCE_LINE,
    Target,
    fence_closed_by,
    fence_opened,
    split_rendered,
    table_at,
    table_text,
)


def to_discord(md: str) -> str:
    """Discord renders Markdown itself: only pipe tables (which it does not) become code blocks."""
    lines, out, fence, i = md.split("\n"), [], None, 0
    while i < len(lines):
        line, m = lines[i], FENCE_LINE.fullmatch(lines[i])
        if fence is not None:
            fence = None if m and fence_closed_by(fence, m[1], m[2]) else fence
        elif m and (fence := fence_opened(m[1], m[2])):
            pass
        elif found := table_at(lines, i):
            out.append(f"```\n{table_text(found[0])}\n```")
            i = found[1]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


_DISCORD = Target(to_discord, str, str)


def split_rendered_discord(md: str, limit: int = 2000) -> list[str]:
    """Like `split_rendered_telegram`, for Discord; parts are at most `limit` units."""
    return split_rendered(md, limit, _DISCORD)
