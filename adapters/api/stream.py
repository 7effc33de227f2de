"""The local API's server-sent events: one streamed chat completion, from the first delta to
`[DONE]`, however the run ends (a reply, an error, an interruption, the gateway stopping)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from adapters.api.wire import (
    Ended,
    chunk,
    error_body,
    failure,
    file_links,
    hermes_field,
    usage_of,
)
from hermes_gateway.platforms import OutboundMessage

log = structlog.get_logger("hermes.adapters.api")


@dataclass(frozen=True, slots=True)
class ToolNote:
    """A tool started or ended in the run; sent in a chunk's `hermes` field, no content."""

    tool: str
    phase: str  # "start" | "end"
    ok: bool | None = None


Item = str | ToolNote | OutboundMessage | Ended


class SseSink:
    """Collects deltas, tool notes and the final message for one streaming request."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Item] = asyncio.Queue()

    def push(self, text: str) -> None:
        self.queue.put_nowait(text)

    def tool(self, name: str, phase: str, ok: bool | None) -> None:
        self.queue.put_nowait(ToolNote(name, phase, ok))


@dataclass(frozen=True, slots=True)
class StreamMeta:
    chat_id: str
    model: str
    session_key: str
    include_usage: bool
    ignored: tuple[str, ...] = ()  # what the request sent that the gateway did not use


async def stream_response(
    request: web.Request, sink: SseSink, meta: StreamMeta
) -> web.StreamResponse:
    """Headers go out with the first item, so a request that fails before any text (no
    model, the model down) gets a real error status rather than a 200 stream."""
    item = await sink.queue.get()
    if (error := _failed(item)) is not None:
        raise error
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    try:
        await response.prepare(request)
        await _sse(response, chunk(meta.chat_id, meta.model, {"role": "assistant", "content": ""}))
        streamed: list[str] = []
        while isinstance(item, str | ToolNote):
            await _sse(response, _piece(meta, item))
            if isinstance(item, str):
                streamed.append(item)
            item = await sink.queue.get()
        await _finish(response, meta, item, "".join(streamed))
    except ConnectionError:  # the client went away mid-stream: its answer is in the history
        log.info("api.client_gone", session_key=meta.session_key)
    return response


def _failed(item: Item) -> Exception | None:
    return None if isinstance(item, str | ToolNote) else failure(item)


def _piece(meta: StreamMeta, item: str | ToolNote) -> dict[str, Any]:
    if isinstance(item, str):
        return chunk(meta.chat_id, meta.model, {"content": item})
    # OpenAI clients ignore the extra field; `hermes chat` shows it as tool activity
    payload = chunk(meta.chat_id, meta.model, {})
    payload["hermes"] = {"tool": item.tool, "phase": item.phase, "ok": item.ok}
    return payload


async def _finish(
    response: web.StreamResponse, meta: StreamMeta, item: OutboundMessage | Ended, so_far: str
) -> None:
    error = failure(item)
    if error is not None:  # after text went out: an error event, which OpenAI SDKs raise
        await _sse(response, error_body(error))
    else:
        if isinstance(item, OutboundMessage):
            text = item.text
            rest = text[len(so_far) :] if text.startswith(so_far) else text
            if rest:
                sep = "\n\n" if so_far and not text.startswith(so_far) else ""
                await _sse(response, chunk(meta.chat_id, meta.model, {"content": sep + rest}))
            kind: str = item.kind
            run_id = item.run_id
        else:
            kind, run_id = item.why, item.run_id
        final = chunk(meta.chat_id, meta.model, {}, finish="stop")
        final["hermes"] = hermes_field(kind, run_id, meta.ignored)
        if isinstance(item, OutboundMessage) and item.files:
            final["hermes"]["files"] = file_links(item)
        await _sse(response, final)
        if meta.include_usage:
            usage = usage_of(item)
            tail = chunk(meta.chat_id, meta.model, {})
            tail["choices"], tail["usage"] = [], usage
            await _sse(response, tail)
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


async def _sse(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
