"""A wire-level fake of an OpenAI-compatible chat API, scripted per request, for offline tests.

Serves ``/v1/chat/completions`` (JSON and SSE), ``/v1/models`` and ``/v1/embeddings``
(deterministic vectors from `tests.fakes.embeddings`; `embeddings_down` makes it answer 503);
``python -m tests.fakes.openai`` runs it standalone for benchmarks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes import embeddings as fake_vectors
from tests.fakes.server import FakeServer

DEFAULT_CHUNK_SIZE = 8
_BODY_BYTES: contextvars.ContextVar[int] = contextvars.ContextVar("body_bytes", default=0)

_ERROR_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_denied", None),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


# -- response specs -------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    content: str
    delay: float = 0.0
    chunk_size: int | None = None
    chunk_delay: float = 0.0
    finish_reason: str = "stop"
    usage: dict[str, int] | None = None


@dataclass(frozen=True)
class ToolCalls:
    calls: tuple[tuple[str, dict[str, Any] | str, str | None], ...]
    content: str | None = None
    delay: float = 0.0
    chunk_size: int | None = None


@dataclass(frozen=True)
class Error:
    status: int
    message: str | None = None
    retry_after: str | float | None = None
    body: dict[str, Any] | str | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class Raw:
    body: bytes | str
    status: int = 200
    content_type: str = "application/json"
    delay: float = 0.0


@dataclass(frozen=True)
class Hang:
    seconds: float
    delay: float = 0.0


Response = Text | ToolCalls | Error | Raw | Hang
Responder = Callable[[dict[str, Any]], Response]


def text(
    content: str,
    *,
    delay: float = 0.0,
    chunk_size: int | None = None,
    chunk_delay: float = 0.0,
    finish_reason: str = "stop",
    usage: dict[str, int] | None = None,
) -> Text:
    """An assistant text reply; ``chunk_size``/``chunk_delay`` shape it when streamed."""
    return Text(content, delay, chunk_size, chunk_delay, finish_reason, usage)


def tool_calls(
    *calls: tuple[Any, ...],
    content: str | None = None,
    delay: float = 0.0,
    chunk_size: int | None = None,
) -> ToolCalls:
    """Each call is ``(name, arguments[, call_id])``; str arguments are sent verbatim."""
    norm = tuple((c[0], c[1], c[2] if len(c) > 2 else None) for c in calls)
    return ToolCalls(norm, content, delay, chunk_size)


def error(
    status: int,
    *,
    message: str | None = None,
    retry_after: str | float | None = None,
    body: dict[str, Any] | str | None = None,
    delay: float = 0.0,
) -> Error:
    """An OpenAI-style error; ``body`` replaces the generated JSON entirely."""
    return Error(status, message, retry_after, body, delay)


def raw(
    body: bytes | str,
    *,
    status: int = 200,
    content_type: str = "application/json",
    delay: float = 0.0,
) -> Raw:
    """Exactly these bytes, for malformed JSON, broken SSE or unexpected shapes."""
    return Raw(body, status, content_type, delay)


def hang(seconds: float) -> Hang:
    """Accept the request, answer nothing for ``seconds``, then drop the connection."""
    return Hang(seconds)


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    kind, code = _ERROR_KINDS.get(status, ("server_error", None))
    msg = message or f"fake error {status}"
    return {"error": {"message": msg, "type": kind, "param": None, "code": code}}


def last_user_text(body: dict[str, Any]) -> str:
    for msg in reversed(body.get("messages") or []):
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if p.get("type") == "text")
        return str(content or "")
    return ""


def _chunks(s: str, size: int) -> list[str]:
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


def _tokens(s: str) -> int:
    # A rough 4-chars-per-token estimate: tests only need stable, non-zero numbers.
    return max(1, len(s) // 4)


# -- the server -----------------------------------------------------------------------------


class FakeOpenAI(FakeServer):
    """Scripted OpenAI-compatible server; see the module docstring and `push`."""

    def __init__(
        self,
        api_key: str | None = "sk-fake",
        models: list[str] | None = None,
        port: int = 0,
        keep: int | None = None,
    ) -> None:
        super().__init__(port)
        self.api_key = api_key  # None accepts any key
        self.models = models or ["gpt-4o-mini"]
        self.responder: Responder | None = None
        self.delay = 0.0
        self._lock = threading.Lock()
        self._script: deque[Response] = deque()
        # every request body (tests read them), or the last ``keep``: a benchmark's thousands
        # of requests, each with the whole history, made this process's heap grow by the
        # square of the history and its garbage collections stall the side that sends one
        self._requests: deque[dict[str, Any]] = deque(maxlen=keep)
        self._count = 0
        self._ids = {"call_": 0, "chatcmpl-": 0}
        self.in_flight = 0
        self.max_in_flight = 0
        # when chat requests came, in seconds since the last reset: the first and the latest
        self._reset_at = time.monotonic()
        self._arrivals: tuple[float, float] | None = None
        # per-session in-flight tracking, for tests that must never see one session run twice
        # at once: `session_of(body)` names a request's session (None: not tracked); a request
        # whose client is gone (its process was killed) no longer counts as running
        self.session_of: Callable[[dict[str, Any]], str | None] | None = None
        self.overlaps: list[tuple[str, float]] = []  # (session, time.monotonic()) of each
        self._running: dict[str, list[web.Request]] = {}
        self.cancelled = 0
        self._closing: asyncio.Event | None = None
        self.app.on_startup.append(self._on_startup)
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_post("/v1/embeddings", self._embeddings)
        self.embeddings_down = False  # answer /v1/embeddings with 503
        self.embedding_inputs: list[list[str]] = []  # each request's texts, in arrival order
        self.app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        self.transcription = "hello from the fake transcriber"  # what every upload says
        self.transcriptions_down = False  # answer /v1/audio/transcriptions with 503
        # each upload's multipart fields: "model", and "file" as (filename, content type, bytes)
        self.transcription_uploads: list[dict[str, Any]] = []
        # Control API for other processes (benchmarks): counters, and a reset between phases.
        self.app.router.add_get("/_fake/stats", self._ctl_stats)
        self.app.router.add_post("/_fake/reset", self._ctl_reset)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot of every chat request body so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def start(self) -> FakeOpenAI:
        super().start()
        return self

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def push(self, *responses: Response) -> FakeOpenAI:
        """Queue replies; each request consumes one, first in first out."""
        with self._lock:
            self._script.extend(responses)
        return self

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._requests.clear()
            self._count = 0
            self.max_in_flight = self.in_flight
            self._reset_at = time.monotonic()
            self._arrivals = None
            self.cancelled = 0
            self.embeddings_down = False
            self.embedding_inputs.clear()
            self.transcriptions_down = False
            self.transcription_uploads.clear()
            # a test's session tracking ends with it: another test's requests are not its own
            self.session_of = None
            self.overlaps.clear()
            self._running.clear()

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._script)

    async def _on_startup(self, app: web.Application) -> None:
        self._closing = asyncio.Event()  # bound to this run's loop

    async def on_shutdown(self) -> None:
        # Wake hangs and delays so a graceful shutdown does not wait for them.
        if self._closing is not None:
            self._closing.set()

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless shutting down; returns False when the fake is closing."""
        assert self._closing is not None
        if seconds > 0:
            try:
                await asyncio.wait_for(self._closing.wait(), seconds)
            except TimeoutError:
                pass
        return not self._closing.is_set()

    async def _hang(self, request: web.Request, seconds: float) -> None:
        """Answer nothing for ``seconds``, or until the client hangs up (a server stops work
        for a request whose connection is gone, so it no longer counts as in flight)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if request.transport is None or request.transport.is_closing():
                return
            if not await self._sleep(min(0.05, deadline - time.monotonic())):
                return

    def _next_id(self, prefix: str) -> str:
        """``call_1``, ``chatcmpl-1``...; never reset, so ids stay unique for the fake's life."""
        with self._lock:
            self._ids[prefix] += 1
            return f"{prefix}{self._ids[prefix]}"

    def _check_auth(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
            return None
        body = error_body(401, "Incorrect API key provided.")
        return web.json_response(body, status=401)

    def _choose(self, body: dict[str, Any]) -> Response:
        with self._lock:
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            return scripted
        if self.responder is not None:
            try:
                return self.responder(body)
            except Exception as exc:  # a broken responder should fail the test, not the server
                return error(500, message=f"fake responder raised {exc!r}")
        return text(f"echo: {last_user_text(body)}")

    def stats(self) -> dict[str, Any]:
        """Since the last `reset`: chat requests, calls in flight now and at most, and how many
        messages the latest request carried."""
        with self._lock:
            last = self._requests[-1] if self._requests else {}
            return {
                "requests": self._count,
                "last_messages": len(last.get("messages") or []),  # history sent, by turns
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "cancelled": self.cancelled,
                "delay": self.delay,
                # a crowd's model calls began between these (s since the reset): the gateway's
                # intake is the time to the last one
                "first_request_s": None if self._arrivals is None else self._arrivals[0],
                "last_request_s": None if self._arrivals is None else self._arrivals[1],
            }

    async def _ctl_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _ctl_reset(self, request: web.Request) -> web.Response:
        """`reset`; a JSON body ``{"delay": s}`` also sets the delay of every reply."""
        options = await request.json() if request.can_read_body else {}
        if not isinstance(options, dict):
            return web.json_response({"error": "body must be a JSON object"}, status=400)
        if "delay" in options:
            self.delay = float(options["delay"])
        self.reset()
        return web.json_response(self.stats())

    async def _models(self, request: web.Request) -> web.Response:
        if (denied := self._check_auth(request)) is not None:
            return denied
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _embeddings(self, request: web.Request) -> web.Response:
        if (denied := self._check_auth(request)) is not None:
            return denied
        body = await request.json()
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        with self._lock:
            self.embedding_inputs.append(texts)
        if self.embeddings_down:
            return web.json_response(error_body(503, "embeddings are down"), status=503)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vectors.embed(t)}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": sum(map(_tokens, texts)), "total_tokens": 0}
        return web.json_response(
            {"object": "list", "data": data, "model": body.get("model", ""), "usage": usage}
        )

    async def _transcriptions(self, request: web.Request) -> web.Response:
        if (denied := self._check_auth(request)) is not None:
            return denied
        fields: dict[str, Any] = {}
        async for part in await request.multipart():
            if not isinstance(part, BodyPartReader) or part.name is None:
                continue
            data = await part.read()
            if part.filename is not None:
                fields[part.name] = (part.filename, part.headers.get("Content-Type", ""), data)
            else:
                fields[part.name] = data.decode()
        with self._lock:
            self.transcription_uploads.append(fields)
        if self.transcriptions_down:
            return web.json_response(error_body(503, "transcription is down"), status=503)
        if "file" not in fields or "model" not in fields:
            return web.json_response(error_body(400, "'file' and 'model' are required"), status=400)
        return web.json_response({"text": self.transcription})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if (denied := self._check_auth(request)) is not None:
            return denied
        _BODY_BYTES.set(request.content_length or 0)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(error_body(400, "body is not valid JSON"), status=400)
        with self._lock:
            self._requests.append(body)
            self._count += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            now = round(time.monotonic() - self._reset_at, 3)
            self._arrivals = (self._arrivals or (now, now))[0], now
        session = self._track(body, request)
        try:
            spec = self._choose(body)
            if not await self._sleep(self.delay + spec.delay):
                return web.Response(status=503)
            return await self._respond(request, body, spec)
        finally:
            with self._lock:
                self.in_flight -= 1
                running = self._running.get(session or "", [])
                if request in running:  # a reset meanwhile forgot it
                    running.remove(request)

    def _track(self, body: dict[str, Any], request: web.Request) -> str | None:
        """Note the request under its session; a second live one of that session is an
        overlap (two runs of one session at once). Requests of dead clients are dropped."""
        session = self.session_of(body) if self.session_of is not None else None
        if session is None:
            return None
        with self._lock:
            running = self._running.setdefault(session, [])
            alive = [r for r in running if r.transport is not None and not r.transport.is_closing()]
            if alive:
                self.overlaps.append((session, time.monotonic()))
            running.append(request)
        return session

    async def _respond(
        self, request: web.Request, body: dict[str, Any], spec: Response
    ) -> web.StreamResponse:
        if isinstance(spec, Hang):
            await self._hang(request, spec.seconds)
            # Drop the connection without a response, as a dead upstream would.
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=504)
        if isinstance(spec, Error):
            return self._error_response(spec)
        if isinstance(spec, Raw):
            data = spec.body.encode() if isinstance(spec.body, str) else spec.body
            return web.Response(body=data, status=spec.status, content_type=spec.content_type)
        if body.get("stream"):
            return await self._stream(request, body, spec)
        return web.json_response(self._completion(body, spec))

    def _error_response(self, spec: Error) -> web.Response:
        headers = {} if spec.retry_after is None else {"retry-after": str(spec.retry_after)}
        if isinstance(spec.body, str):
            return web.Response(
                text=spec.body, status=spec.status, headers=headers, content_type="application/json"
            )
        payload = spec.body if spec.body is not None else error_body(spec.status, spec.message)
        return web.json_response(payload, status=spec.status, headers=headers)

    def _envelope(self, body: dict[str, Any], obj: str) -> dict[str, Any]:
        return {
            "id": self._next_id("chatcmpl-"),
            "object": obj,
            "created": int(time.time()),
            "model": body.get("model") or self.models[0],
            "system_fingerprint": "fp_fake",
        }

    def _usage(self, body: dict[str, Any], spec: Text | ToolCalls, out: str) -> dict[str, int]:
        if isinstance(spec, Text) and spec.usage is not None:
            return spec.usage
        # from the request's size, not a re-encoding of every message: a long history must
        # not make the fake slower per call than the gateway being measured against it
        prompt = max(1, _BODY_BYTES.get() // 4)
        completion = _tokens(out)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _rendered_calls(self, spec: ToolCalls) -> list[dict[str, Any]]:
        return [
            {
                "id": call_id or self._next_id("call_"),
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for name, args, call_id in spec.calls
        ]

    def _completion(self, body: dict[str, Any], spec: Text | ToolCalls) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": spec.content, "refusal": None}
        if isinstance(spec, ToolCalls):
            message["tool_calls"] = self._rendered_calls(spec)
            out = json.dumps(message["tool_calls"])
            finish = "tool_calls"
        else:
            out, finish = spec.content, spec.finish_reason
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        result = self._envelope(body, "chat.completion")
        result.update(choices=[choice], usage=self._usage(body, spec, out))
        return result

    def _deltas(self, spec: Text | ToolCalls) -> list[tuple[dict[str, Any], float]]:
        """The streamed deltas, each with the pause to take before sending it."""
        size = spec.chunk_size or DEFAULT_CHUNK_SIZE
        if isinstance(spec, Text):
            parts = [({"content": p}, spec.chunk_delay) for p in _chunks(spec.content, size)]
            return [({"role": "assistant", "content": ""}, 0.0), *parts]
        deltas: list[tuple[dict[str, Any], float]] = [
            ({"role": "assistant", "content": spec.content}, 0.0)
        ]
        for index, call in enumerate(self._rendered_calls(spec)):
            name, args = call["function"]["name"], call["function"]["arguments"]
            # Like OpenAI: only the first fragment of a call carries its id and name.
            head = {**call, "index": index, "function": {"name": name, "arguments": ""}}
            deltas.append(({"tool_calls": [head]}, 0.0))
            for part in _chunks(args, size):
                frag = {"index": index, "function": {"arguments": part}}
                deltas.append(({"tool_calls": [frag]}, 0.0))
        return deltas

    def _frames(
        self, body: dict[str, Any], spec: Text | ToolCalls
    ) -> list[tuple[dict[str, Any], float]]:
        """Every SSE payload but ``[DONE]``, each with the pause to take before sending it."""
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base = self._envelope(body, "chat.completion.chunk")
        if include_usage:
            base["usage"] = None  # OpenAI sends an explicit null on every chunk but the last
        finish = "tool_calls" if isinstance(spec, ToolCalls) else spec.finish_reason
        deltas = [*self._deltas(spec), ({}, 0.0)]
        frames = [
            ({**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}, pause)
            for d, pause in deltas
        ]
        frames[-1][0]["choices"][0]["finish_reason"] = finish
        if include_usage:
            out = "".join(str(d.get("content") or "") for d, _ in deltas)
            frames.append(({**base, "choices": [], "usage": self._usage(body, spec, out)}, 0.0))
        return frames

    async def _stream(
        self, request: web.Request, body: dict[str, Any], spec: Text | ToolCalls
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for frame, pause in self._frames(body, spec):
                if not await self._sleep(pause):
                    return resp
                await resp.write(f"data: {json.dumps(frame)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionError:
            # The client went away mid-stream (closed the stream, or timed out).
            with self._lock:
                self.cancelled += 1
        return resp


# -- CLI --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--api-key", default="sk-fake")
    parser.add_argument("--model", action="append", dest="models")
    parser.add_argument("--keep", type=int, default=None, help="request bodies kept (all)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    fake = FakeOpenAI(api_key=args.api_key, models=args.models, port=args.port, keep=args.keep)
    fake.delay = args.delay
    fake.start()
    print(f"READY {fake.base_url}", flush=True)
    # A timed wait so the main thread gets back to Python often enough to run signal handlers.
    while not stop.wait(0.2):
        pass
    fake.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
