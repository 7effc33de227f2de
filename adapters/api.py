"""The local API platform: an OpenAI-compatible `POST /v1/chat/completions` on the control port.

The `user` field names the session (``api:dm:<user>``); the gateway keeps the history, so a
client sends only its new message. Streaming uses SSE. `hermes chat` is built on this.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import structlog
from aiohttp import web

from hermes_gateway.errors import RequestError
from hermes_gateway.events import MessageEvent, OutboundMessage, without_surrogates
from hermes_gateway.platform import AdapterHost, Health, StreamSink

log = structlog.get_logger("hermes.adapters.api")
_SESSION_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@")


class _SseSink:
    """Collects deltas from the run and the final message for one streaming request."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | OutboundMessage] = asyncio.Queue()

    def push(self, text: str) -> None:
        self.queue.put_nowait(text)


class ApiAdapter:
    name = "api"

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self._open = False
        self._waiters: dict[str, asyncio.Future[OutboundMessage]] = {}
        self._sinks: dict[str, _SseSink] = {}
        host.add_route("POST", "/v1/chat/completions", self.chat_completions)
        host.add_route("GET", "/v1/models", self.models)
        host.add_route("GET", "/v1/history", self.history)

    async def start(self) -> None:
        self._open = True

    async def stop(self) -> None:
        self._open = False

    async def close(self) -> None:
        for fut in self._waiters.values():
            if not fut.done():
                fut.cancel()

    def health(self) -> Health:
        return Health(self._open, "" if self._open else "stopped")

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return self._sinks.get(event.message_id)

    async def send(self, message: OutboundMessage) -> None:
        delivered = False
        for message_id in message.answers:
            sink = self._sinks.get(message_id)
            if sink is not None:
                sink.queue.put_nowait(message)
                delivered = True
            fut = self._waiters.get(message_id)
            if fut is not None and not fut.done():
                fut.set_result(message)
                delivered = True
        if not delivered:
            # the client is gone (or this is a replay after a restart): it is in the history
            log.debug("api.no_listener", answers=message.answers, kind=message.kind)

    # -- HTTP handlers --------------------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        if not self._open:
            raise RequestError(503, "the gateway is shutting down", "unavailable")
        body = await _json_body(request)
        text = _last_user_text(body)
        limit = self.host.config.runner.max_input_chars
        if len(text) > limit:
            raise RequestError(
                413, f"message is {len(text)} characters; the limit is {limit}", "too_long"
            )
        user = _session_name(body.get("user"))
        stream = bool(body.get("stream"))
        message_id = request.headers.get("Idempotency-Key") or uuid.uuid4().hex
        if (first := self._waiters.get(message_id)) is not None:
            return await self._same_as(first, message_id, stream)
        event = MessageEvent.create(
            platform="api",
            chat_type="dm",
            chat_id=user,
            user_id=user,
            message_id=message_id,
            text=text,
            user_name=user,
        )
        fut: asyncio.Future[OutboundMessage] = asyncio.get_running_loop().create_future()
        self._waiters[message_id] = fut
        sink = _SseSink() if stream else None
        if sink is not None:
            self._sinks[message_id] = sink
        try:
            outcome = await self.host.submit(event)
            if outcome == "duplicate":
                raise RequestError(409, f"message {message_id} was already received", "duplicate")
            if outcome != "accepted":
                raise RequestError(400, f"message not accepted: {outcome}", outcome)
            if sink is not None:
                return await self._stream_response(request, sink, event)
            reply = await fut
            return web.json_response(_completion(reply, self.host.config.model.name))
        finally:  # only this request's own: a duplicate must not unhook the first
            if self._waiters.get(message_id) is fut:
                del self._waiters[message_id]
            fut.cancel()  # a retry waiting on it learns there is no answer coming
            if sink is not None and self._sinks.get(message_id) is sink:
                del self._sinks[message_id]

    async def _same_as(
        self, first: asyncio.Future[OutboundMessage], message_id: str, stream: bool
    ) -> web.Response:
        """A retry of a request still in flight (same Idempotency-Key) gets the first one's
        answer; the first is left alone. A stream cannot be joined halfway: 409."""
        if stream:
            raise RequestError(
                409,
                f"message {message_id} is still being answered; retry without stream",
                "in_flight",
            )
        await asyncio.wait({first})  # leaving early must not cancel the first
        if first.cancelled():  # the first ended without an answer (refused, or a stop)
            raise RequestError(409, f"message {message_id} was not answered", "duplicate")
        reply = first.result()
        return web.json_response(_completion(reply, self.host.config.model.name))

    async def _stream_response(
        self, request: web.Request, sink: _SseSink, event: MessageEvent
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        model = self.host.config.model.name
        chunk_id = f"chatcmpl-{event.message_id[:24]}"
        streamed: list[str] = []
        while True:
            item = await sink.queue.get()
            if isinstance(item, str):
                streamed.append(item)
                await _sse(response, _chunk(chunk_id, model, {"content": item}))
                continue
            so_far = "".join(streamed)
            rest = item.text[len(so_far) :] if item.text.startswith(so_far) else item.text
            if rest:
                sep = "\n\n" if so_far and not item.text.startswith(so_far) else ""
                await _sse(response, _chunk(chunk_id, model, {"content": sep + rest}))
            final = _chunk(chunk_id, model, {}, finish="stop")
            final["hermes"] = {"kind": item.kind, "run_id": item.run_id}
            await _sse(response, final)
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response

    async def models(self, request: web.Request) -> web.Response:
        name = self.host.config.model.name
        return web.json_response(
            {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "hermes"}]}
        )

    async def history(self, request: web.Request) -> web.Response:
        user = _session_name(request.query.get("user"))
        key = MessageEvent.create(
            platform="api", chat_type="dm", chat_id=user, user_id=user, message_id="-", text=""
        ).session_key
        messages = await self.host.history(key)
        return web.json_response({"session_key": key, "messages": messages})


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except RecursionError:
        raise RequestError(400, "the request body is nested too deeply", "invalid_json") from None
    except ValueError:  # bad JSON or UTF-8, or an integer over Python's digit limit
        raise RequestError(400, "the request body is not valid JSON", "invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return body


def _last_user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty array", "invalid_messages")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise RequestError(400, "the last message must have role 'user'", "invalid_messages")
    content = last.get("content")
    if isinstance(content, list):
        parts = [
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        ]
        content = "\n".join(p for p in parts if isinstance(p, str))
    if not isinstance(content, str):
        raise RequestError(
            400, "message content must be a string or text parts", "invalid_messages"
        )
    if not content.strip():
        raise RequestError(400, "the message is empty", "empty_message")
    return without_surrogates(content)


def _session_name(value: Any) -> str:
    if value is None or value == "":
        return "default"
    name = str(value)
    if len(name) > 128 or not set(name) <= _SESSION_CHARS:
        raise RequestError(
            400, "'user' must be 1-128 characters of letters, digits and -_.@", "invalid_user"
        )
    return name


def _completion(reply: OutboundMessage, model: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{reply.run_id or uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "hermes": {"kind": reply.kind, "run_id": reply.run_id},
    }


def _chunk(
    chunk_id: str, model: str, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


async def _sse(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
