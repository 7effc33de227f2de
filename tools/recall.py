"""`session_search`: full-text search over this chat's past messages (earlier conversations
too, and turns already compacted out of the context), through the gateway's store."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import ToolError
from tools.registry import ModelTool, ToolContext

if TYPE_CHECKING:
    from tools.catalog import ToolSettings


class SessionSearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        description="Words to look for in past messages, e.g. 'postgres backup schedule'. "
        "Messages containing all the words rank first.",
        min_length=1,
        max_length=300,
    )
    limit: int = Field(10, ge=1, le=50, description="Most messages to return.")


class SessionSearchTool(ModelTool):
    name = "session_search"
    description = (
        "Search the past messages of this chat, including earlier conversations (before "
        "/new) and parts of this one that were summarized away. Returns the best matches with "
        "their date and who wrote them. Use it before relying on a past decision."
    )
    parallel_safe = True
    Args = SessionSearchArgs

    def call(self, args: SessionSearchArgs, ctx: ToolContext) -> str:
        search = ctx.host.search_history
        if search is None or not ctx.session_key:
            raise ToolError("past conversations cannot be searched here")
        hits = search(ctx.session_key, args.query.strip(), args.limit)
        if not hits:
            return f"(no past messages match {args.query.strip()!r})"
        lines = []
        for hit in hits:
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(hit.when))
            where = "this conversation" if hit.current else "earlier conversation"
            lines.append(f"[{when} UTC, {where}] {hit.role}: {hit.snippet}")
        return "\n".join(lines)


def make_session_search(settings: ToolSettings) -> SessionSearchTool:
    return SessionSearchTool()
