"""The local API platform: an OpenAI-compatible `POST /v1/chat/completions` on the control port.

With `user` (or an `X-Hermes-Session` header) the gateway keeps the session's history and a
client sends only its new message; without one the request is stateless: the client's messages
are the history, in a session of its own. Streaming uses SSE. `hermes chat` is built on this.
In a cluster a request whose session another instance runs is answered there and its answer
brought back here (`adapters/api/relay.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from adapters.api.feed import Feeds, shared, unasked
from adapters.api.files import FILES_PATH, FileShelf
from adapters.api.relay import CARRY_PATH, FEED_PATH, Hop, beat_for, follow, pump, stored
from adapters.api.stream import Item, SseSink, StreamMeta, stream_response
from adapters.api.wire import (
    Ended,
    client_history,
    completion,
    failure,
    ignored_parts,
    last_user_message,
    save_data_url,
    session_name,
)
from hermes_gateway.platforms import (
    AdapterHost,
    Attachment,
    Health,
    LifecycleEvent,
    MessageEvent,
    OutboundMessage,
    Peers,
    PeerUnreachable,
    PermanentAdapterError,
    RequestError,
    StreamSink,
    body_done,
    loads,
    read_object,
)

log = structlog.get_logger("hermes.adapters.api")
SHARE_READ_S = 5.0  # an instance that takes longer to take a feed item misses it
Answer = OutboundMessage | Ended


class ApiAdapter:
    name = "api"

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self._open = False
        self._waiters: dict[str, asyncio.Future[Answer]] = {}
        self._sinks: dict[str, SseSink] = {}
        self._cut_short: dict[str, str] = {}  # request -> the run that was cut short
        self.feeds = Feeds()  # what the gateway says unasked, to whoever listens to a session
        self._following: dict[str, asyncio.Task[None]] = {}  # request -> its answer elsewhere
        # requests whose run was cut off unanswered (its lease lost, its owner gone): run again
        self._lost: set[str] = set()
        # the chat API: open on a loopback bind with no control.token, like curl expects
        host.add_route("POST", "/v1/chat/completions", self.chat_completions, access="client")
        host.add_route("GET", "/v1/models", self.models, access="client")
        host.add_route("GET", "/v1/history", self.history, access="client")
        host.add_route("GET", "/v1/events", self.events, access="client")
        host.add_route("*", "/v1/responses", self.responses, access="client")
        self.shelf = FileShelf()  # an answer's files (`send_file`), until its client fetches them
        host.add_route("GET", FILES_PATH, self.shelf.serve, access="client")
        host.bus.subscribe(self._on_lifecycle, ["processing_complete"], name="api-adapter")
        if host.peers is not None:  # cluster: requests other instances took, signed by them
            host.add_route("POST", CARRY_PATH, self.carried, access="public")
            host.add_route("POST", FEED_PATH, self.shared_here, access="public")
        self._sharing: set[asyncio.Task[None]] = set()  # feed items on their way to the others

    async def start(self) -> None:
        if self.host.peers is not None:  # while it serves the API, its peers can reach it
            await self.host.peers.start()
        self._open = True

    async def stop(self) -> None:
        self._open = False  # open streams go on through the drain

    async def close(self) -> None:
        """Whatever is still open gets its end now: `[DONE]` for a stream, 503 for a wait."""
        for key in [*self._waiters, *self._sinks]:
            self._end(key, Ended("shutting_down"))
        self.feeds.close()
        for task in list(self._sharing):
            task.cancel()
        await asyncio.gather(*self._sharing, return_exceptions=True)
        if self.host.peers is not None:
            await self.host.peers.close()

    def health(self) -> Health:
        return Health(self._open, "" if self._open else "stopped")

    def stream(self, event: MessageEvent) -> StreamSink | None:
        key = _key(event.session_key, event.message_id)
        # the run after one cut off mid-way streams nothing: its answer follows whole
        return None if key in self._lost else self._sinks.get(key)

    async def send(self, message: OutboundMessage) -> None:
        """Every request a reply settles gets it (a merged or steered turn answers them all),
        except one whose own run was cut short: it is told so, never given the next answer.
        A message that answers no request (a scheduled job's answer) goes to the session's
        feeds; the history keeps it for a client that was not listening."""
        if not message.answers:
            item = unasked(message.chat_id, message.text, message.kind, message.run_id or None)
            listening = self.feeds.publish(message.chat_id, item)
            log.info("api.unasked", session=message.chat_id, kind=message.kind, feeds=listening)
            if self.host.peers is not None:  # its clients may be listening on another instance
                task = asyncio.create_task(self._share(self.host.peers, message.chat_id, item))
                self._sharing.add(task)
                task.add_done_callback(self._sharing.discard)
            return
        if message.files:  # the answer names where its client fetches each
            message = self.shelf.lend(message)
        delivered = False
        for message_id in message.answers:
            key = _key(message.session_key, message_id)
            # a run cut off with its lease was not cut short: its message is run again
            cut = key in self._cut_short and key not in self._lost and message.kind == "reply"
            answer: Answer = Ended("interrupted", self._cut_short[key]) if cut else message
            delivered = self._end(key, answer) or delivered
        if not delivered:
            # the client is gone (or this is a replay after a restart): it is in the history
            log.debug("api.no_listener", answers=message.answers, kind=message.kind)

    async def download(self, attachment: Attachment) -> Path:
        """An image the client sent inline, as a file for the image tool."""
        folder = self.host.config.home_path / "media"
        try:
            return await asyncio.to_thread(save_data_url, attachment.url, folder)
        except (ValueError, OSError) as exc:
            raise PermanentAdapterError(str(exc)) from None

    def _end(self, key: str, answer: Answer) -> bool:
        found = False
        if (sink := self._sinks.get(key)) is not None:
            sink.queue.put_nowait(answer)
            found = True
        fut = self._waiters.get(key)
        if fut is not None and not fut.done():
            fut.set_result(answer)
            found = True
        return found

    async def _on_lifecycle(self, ev: LifecycleEvent) -> None:
        if ev.message is None:
            return
        key = _key(ev.message.session_key, ev.message.message_id)
        if ev.data.get("status") == "interrupted":  # overtaken, or the gateway stopping
            why = "interrupted" if self._open else "shutting_down"
            usage = tuple((str(k), int(v)) for k, v in (ev.data.get("usage") or {}).items())
            self._end(key, Ended(why, ev.run_id, usage))
        elif ev.data.get("status") == "abandoned" and key in self._waiters:
            # a /stop answers it ("Stopped."); a newer message's reply must not
            self._cut_short[key] = ev.run_id

    # -- HTTP handlers --------------------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        if not self._open:
            raise RequestError(503, "the gateway is shutting down; retry", "shutting_down")
        event, stream, include_usage, ignored = await self._event(request)
        key = _key(event.session_key, event.message_id)  # one client's key is not another's
        if (first := self._waiters.get(key)) is not None:
            return await self._same_as(first, event.message_id, stream)
        fut, sink = self._listen(key, stream)
        meta = StreamMeta(
            f"chatcmpl-{uuid.uuid4().hex[:24]}",
            self.host.config.model.name,
            event.session_key,
            include_usage,
            ignored,
        )
        try:
            await self._submit(event, stream)
            if sink is not None:
                return await stream_response(request, sink, meta)
            return _json_answer(await fut, meta)
        finally:
            self._unlisten(key, fut, sink)
            if (following := self._following.pop(key, None)) is not None:
                following.cancel()

    def _listen(self, key: str, stream: bool) -> tuple[asyncio.Future[Answer], SseSink | None]:
        """A request's answer (and its stream's items) will be put where this returns."""
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiters[key] = fut
        sink = SseSink() if stream else None
        if sink is not None:
            self._sinks[key] = sink
        return fut, sink

    def _unlisten(self, key: str, fut: asyncio.Future[Answer], sink: SseSink | None) -> None:
        """Only this request's own: a duplicate must not unhook the first."""
        if self._waiters.get(key) is fut:
            del self._waiters[key]
        fut.cancel()  # a retry waiting on it learns there is no answer coming
        self._cut_short.pop(key, None)
        self._lost.discard(key)
        if sink is not None and self._sinks.get(key) is sink:
            del self._sinks[key]

    # -- in a cluster ---------------------------------------------------------------------

    def follow(self, event: MessageEvent, inbox_id: int) -> None:
        """Cluster mode: the request's answer is fetched from wherever its session runs, now
        or after its lease moves (docs/cluster.md); whatever comes is put where it waits."""
        key = _key(event.session_key, event.message_id)
        peers, waiter = self.host.peers, self._waiters.get(key)
        if peers is None or waiter is None or waiter.done() or key in self._following:
            return  # nobody waits here (any more): its answer goes into the history
        beat_s = beat_for(peers.lease_s)
        hop = Hop(event.session_key, inbox_id, event.message_id, key in self._sinks, beat_s)
        work = follow(peers, hop, event, partial(self._feed, key), partial(self._lost.add, key))
        self._following[key] = asyncio.create_task(work, name=f"api-follow:{key}")

    def _feed(self, key: str, item: Item) -> None:
        if isinstance(item, OutboundMessage | Ended):
            self._end(key, item)
        elif key not in self._lost and (sink := self._sinks.get(key)) is not None:
            sink.queue.put_nowait(item)

    async def carried(self, request: web.Request) -> web.StreamResponse:
        """A request another instance took for a session this one runs: its inbox entry is
        answered here, and what the answer is made of goes back as JSON lines (`pump`)."""
        peers = self._peers()
        raw = await request.read()
        if (done := body_done.get()) is not None:
            done()  # a few hundred bytes: not held for the whole run
        sender = peers.verify(request.headers, request.path, raw)
        hop = Hop.parse(loads(raw))
        log.debug("api.carried_here", sender=sender, session_key=hop.session_key)
        response = web.StreamResponse(
            headers={"Content-Type": "application/x-ndjson", "Cache-Control": "no-cache"}
        )
        write = partial(_line, response)
        key = _key(hop.session_key, hop.message_id)
        holds = partial(peers.holds, hop.session_key)
        try:
            if not self._open:
                await response.prepare(request)
                await write({"moved": "this instance is stopping"})
            elif (first := self._waiters.get(key)) is not None:  # carried again: join it
                await response.prepare(request)
                await pump(write, partial(asyncio.shield, first), hop.beat_s, holds)
            else:
                await self._answer_here(request, response, hop, peers)
            await response.write_eof()
        except ConnectionError:  # the instance that took it is gone: the answer is stored
            log.info("api.peer_gone", sender=sender, session_key=hop.session_key)
        return response

    async def _answer_here(
        self, request: web.Request, response: web.StreamResponse, hop: Hop, peers: Peers
    ) -> None:
        key = _key(hop.session_key, hop.message_id)
        fut, sink = self._listen(key, hop.stream)
        write = partial(_line, response)
        try:
            where = await peers.take(hop.session_key, hop.inbox_id)
            await response.prepare(request)
            if where.where == "here":
                source = sink.queue.get if sink is not None else partial(asyncio.shield, fut)
                await pump(write, source, hop.beat_s, partial(peers.holds, hop.session_key))
            elif where.where == "answered":
                await write(stored(where))
            else:
                await write({"moved": where.why or f"the session runs on {where.owner}"})
        finally:
            self._unlisten(key, fut, sink)

    async def _share(self, peers: Peers, name: str, item: dict[str, Any]) -> None:
        """Hand an unasked item to every other instance's feeds of the session, side by side;
        one that cannot be reached misses it (the history has it)."""
        body = {"session": name, "item": item}

        async def share(to: str) -> None:
            try:
                async for _ in peers.call(to, FEED_PATH, body, read_s=SHARE_READ_S):
                    pass
            except PeerUnreachable as exc:
                log.info("api.feed_not_shared", to=to, session=name, error=str(exc))

        await asyncio.gather(*(share(to) for to in peers.others()))

    async def shared_here(self, request: web.Request) -> web.Response:
        """Another instance said something unasked in a session: this one's feeds get it."""
        peers = self._peers()
        raw = await request.read()
        peers.verify(request.headers, request.path, raw)
        name, item = shared(loads(raw))
        listening = self.feeds.publish(name, item)
        log.info("api.unasked_shared", session=name, feeds=listening)
        return web.Response(text=json.dumps({"feeds": listening}) + "\n")

    def _peers(self) -> Peers:
        if self.host.peers is None:
            raise RequestError(404, "not in a cluster", "unknown_url")
        return self.host.peers

    async def _event(
        self, request: web.Request
    ) -> tuple[MessageEvent, bool, bool, tuple[str, ...]]:
        body = await read_object(request)  # bounded; its bytes are let go once parsed
        text, attachments = last_user_message(body)
        limit = self.host.config.runner.max_input_chars
        if len(text) > limit:
            raise RequestError(
                413, f"message is {len(text)} characters; the limit is {limit}", "too_long"
            )
        named = request.headers.get("X-Hermes-Session") or body.get("user")
        idempotency_key = request.headers.get("Idempotency-Key")
        message_id = idempotency_key or uuid.uuid4().hex
        extra: dict[str, Any] = {}
        ignored: tuple[str, ...] = ()
        if named is not None and named != "":
            chat_id = session_name(named)
            # the session's own history and system prompt stand; the client is told so
            if ignored := ignored_parts(body):
                log.info("api.messages_ignored", user=chat_id, ignored=list(ignored))
        else:  # stateless: a session of its own ("~" is not allowed in a name); a retry
            # with the same Idempotency-Key lands in the same one, so it is recognized
            chat_id = f"~{_digest(idempotency_key) if idempotency_key else uuid.uuid4().hex}"
            extra["history"] = client_history(body)
        event = MessageEvent.create(
            platform="api",
            chat_type="dm",
            chat_id=chat_id,
            user_id=chat_id,
            message_id=message_id,
            text=text,
            user_name=chat_id,
            attachments=attachments,
            **extra,
        )
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        return event, bool(body.get("stream")), include_usage, ignored

    async def _submit(self, event: MessageEvent, stream: bool) -> None:
        outcome = await self.host.submit(event)
        if outcome == "duplicate":
            if await self._follow_first(event, stream):
                return
            raise RequestError(409, f"message {event.message_id} was already received", "duplicate")
        if outcome == "closed":
            raise RequestError(503, "the gateway is shutting down; retry", "shutting_down")
        if outcome == "unavailable":  # cluster mode: its inbox write failed, and again
            raise RequestError(
                503, "the gateway cannot store messages now; retry", "store_unavailable"
            )
        if outcome != "accepted":
            raise RequestError(400, f"message not accepted: {outcome}", outcome)

    async def _follow_first(self, event: MessageEvent, stream: bool) -> bool:
        """Cluster mode: a retry (same Idempotency-Key) of a request another instance took
        gets that one's answer, from wherever its session runs or from the store once it is
        answered, as a retry on the same instance joins the first (`_same_as`). A stream
        cannot be joined halfway, here as there."""
        peers = self.host.peers
        if peers is None or stream:
            return False
        inbox_id = await peers.entry(event)
        if inbox_id is None:
            return False
        log.info("api.retry_followed", session_key=event.session_key, inbox_id=inbox_id)
        self.follow(event, inbox_id)
        return True

    async def _same_as(
        self, first: asyncio.Future[Answer], message_id: str, stream: bool
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
        meta = StreamMeta(
            f"chatcmpl-{uuid.uuid4().hex[:24]}", self.host.config.model.name, "", False
        )
        return _json_answer(first.result(), meta)

    async def models(self, request: web.Request) -> web.Response:
        name = self.host.config.model.name
        return web.json_response(
            {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "hermes"}]}
        )

    async def history(self, request: web.Request) -> web.Response:
        user = session_name(request.query.get("user") or "default")
        key = MessageEvent.create(
            platform="api", chat_type="dm", chat_id=user, user_id=user, message_id="-", text=""
        ).session_key
        messages = await self.host.history(key)
        return web.json_response({"session_key": key, "messages": messages})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """`GET /v1/events?user=NAME`: the session's feed (see `adapters.api.feed`)."""
        name = request.query.get("user")
        if not name:
            raise RequestError(400, "which session: give ?user=NAME", "missing_user")
        if not self._open:
            raise RequestError(503, "the gateway is shutting down; retry", "shutting_down")
        return await self.feeds.serve(request, session_name(name))

    async def responses(self, request: web.Request) -> web.Response:
        raise RequestError(
            404,
            "the Responses API is not served here; use POST /v1/chat/completions",
            "unknown_url",
        )


async def _line(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(json.dumps(payload).encode() + b"\n")


def _key(session_key: str, message_id: str) -> str:
    return f"{session_key} {message_id}"


def _digest(idempotency_key: str) -> str:
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


def _json_answer(answer: Answer, meta: StreamMeta) -> web.Response:
    error = failure(answer)
    if error is not None:
        raise error
    return web.json_response(completion(answer, meta.model, meta.chat_id, meta.ignored))
