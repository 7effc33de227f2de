"""The webhook platform: each named route of ``platforms.webhook.routes`` is a public `POST`
on the control port. A request's raw body (bounded by the control server) is verified with the
route's secret before a byte of it is parsed, rendered into a prompt by the route's template,
and stored in the inbox under its delivery id (a redelivery is a duplicate) before it is
taken; the answer goes back in the response, to a callback URL or to a chat elsewhere."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from functools import partial
from typing import Any
from urllib.parse import parse_qsl

import structlog
from aiohttp import web

from adapters.webhook.callback import Callbacks
from adapters.webhook.settings import WebhookConfig, WebhookRoute, parse_target
from adapters.webhook.signing import Signed, Unsigned, verify
from adapters.webhook.template import Template, cut, lookup
from hermes_gateway.platforms import (
    AdapterHost,
    Health,
    MessageEvent,
    OutboundMessage,
    RequestError,
    StreamSink,
    body_done,
    loads,
)

log = structlog.get_logger("hermes.adapters.webhook")
PLATFORM = "webhook"
OFF_LOOP_BYTES = 64 * 1024  # a body this large is parsed in a thread
SESSION_CHARS = 64  # a session field's value, as it names the session
LOGGED_CHARS = 2000  # an answer "delivered" to the log
COMMAND_GUARD = "[webhook] "  # before a prompt that would read as a chat command


class WebhookAdapter:
    name = PLATFORM

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self._open = False
        self._waiters: dict[str, asyncio.Future[OutboundMessage]] = {}
        section = self._section()
        self.callbacks = Callbacks(section.callback_networks)
        for route in section.routes:  # routes change with a restart, like any platform key
            path = f"{section.path_prefix}/{route}"
            host.add_route("POST", path, partial(self.receive, route), access="public")

    def _section(self) -> WebhookConfig:
        section: WebhookConfig = getattr(self.host.config.platforms, PLATFORM)
        return section

    async def start(self) -> None:
        self._open = True
        log.info("webhook.started", routes=sorted(self._section().routes))

    async def stop(self) -> None:
        self._open = False

    async def close(self) -> None:
        """After the drain: a request still waiting is told to look for its answer later."""
        for fut in self._waiters.values():
            fut.cancel()
        await self.callbacks.close()

    def health(self) -> Health:
        return Health(self._open, "" if self._open else "stopped")

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return None

    # -- intake ---------------------------------------------------------------------------

    async def receive(self, name: str, request: web.Request) -> web.StreamResponse:
        if not self._open:
            raise RequestError(503, "the gateway is shutting down; retry", "shutting_down")
        route = self._section().routes.get(name)
        if route is None:  # the config in force no longer names it
            raise RequestError(404, f"no webhook route {name}", "unknown_url")
        raw = await request.read()  # read by the control server under its webhook limit
        try:
            signed = verify(
                route.scheme, request.headers, raw, route.secret, time.time(), route.max_skew_s
            )
        except Unsigned as exc:  # logged (sampled) by the control server; never the body
            raise RequestError(
                401, f"not signed for route {name}: {exc}", "invalid_signature"
            ) from None
        try:
            payload = await _parse(raw, request.headers.get("Content-Type", ""))
        finally:
            if (done := body_done.get()) is not None:
                done()
        event = self._event(name, route, signed, payload)
        key = _key(event)
        if (first := self._waiters.get(key)) is not None:  # a redelivery while it runs
            return await self._joined(first, event, route)
        waiter = self._listen(key) if route.deliver == "response" else None
        try:
            outcome = await self.host.submit(event, durable=True)
            log.info("webhook.received", route=name, delivery=signed.delivery, outcome=outcome)
            if outcome == "accepted" and waiter is not None:
                return await self._answer(waiter, event, route)
            return _outcome(outcome, event)
        finally:
            if waiter is not None and self._waiters.get(key) is waiter:
                del self._waiters[key]

    def _event(self, name: str, route: WebhookRoute, signed: Signed, payload: Any) -> MessageEvent:
        extra = {"@route": name, "@event": signed.event, "@delivery": signed.delivery}
        template = Template.parse(route.template)
        text = template.render(payload, extra, route.field_chars, route.prompt_chars)
        if text.strip().startswith("/"):  # a payload never runs a chat command (/reset, /stop)
            text = COMMAND_GUARD + text
        chat_id = name
        if route.session_field:
            value = lookup(payload, tuple(route.session_field.split(".")))
            shown = "".join(c if c.isprintable() else "?" for c in str(value or ""))
            chat_id = f"{name}:{cut(shown, SESSION_CHARS)}"
        return MessageEvent.create(
            platform=PLATFORM,
            chat_type="dm",
            chat_id=chat_id,
            user_id=name,
            message_id=signed.delivery,
            text=text,
            user_name=name,
        )

    def _listen(self, key: str) -> asyncio.Future[OutboundMessage]:
        fut: asyncio.Future[OutboundMessage] = asyncio.get_running_loop().create_future()
        self._waiters[key] = fut
        return fut

    async def _answer(
        self, waiter: asyncio.Future[OutboundMessage], event: MessageEvent, route: WebhookRoute
    ) -> web.Response:
        """The answer within the route's timeout; else 202, and the answer, when it comes,
        goes to the route's fallback (so does one cut off by the gateway stopping)."""
        await asyncio.wait({waiter}, timeout=route.timeout_s)
        if waiter.done() and not waiter.cancelled():
            return _answered(waiter.result(), event)
        waiter.cancel()
        return _accepted(event, later=route.fallback)

    async def _joined(
        self, first: asyncio.Future[OutboundMessage], event: MessageEvent, route: WebhookRoute
    ) -> web.Response:
        """A redelivery of a request still being answered: the first one's answer, once."""
        done, _ = await asyncio.wait({first}, timeout=route.timeout_s)
        if done and not first.cancelled():
            return _answered(first.result(), event, duplicate=True)
        return _outcome("duplicate", event)

    # -- the answer -----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """Where the route says: the open request, a callback, a chat elsewhere, the log."""
        name = message.chat_id.partition(":")[0]
        route = self._section().routes.get(name)
        if route is None or not message.answers:
            # a route removed since, or something said unasked: the session's history has it
            log.info("webhook.answer_dropped", route=name, kind=message.kind)
            return
        where = route.deliver
        if where == "response":
            if self._resolve(message):
                return
            where = route.fallback  # nobody waits any more (timed out, or a restart since)
        await self._deliver(where, route, message)

    def _resolve(self, message: OutboundMessage) -> bool:
        found = False
        for message_id in message.answers:
            fut = self._waiters.get(f"{message.session_key} {message_id}")
            if fut is not None and not fut.done():
                fut.set_result(message)
                found = True
        return found

    async def _deliver(self, where: str, route: WebhookRoute, message: OutboundMessage) -> None:
        delivery = message.answers[0]
        if where == "log":
            log.info(
                "webhook.answer_logged",
                delivery=delivery,
                kind=message.kind,
                text=cut(message.text, LOGGED_CHARS),
            )
        elif where == "callback":
            if message.skip_parts:  # an earlier attempt got it there
                return
            if message.on_sending is not None:  # the intent a crash leaves behind
                await message.on_sending(0, "")
            if message.doubt is not None:  # no way to ask the receiver: it has the id to drop
                log.info("webhook.callback_resent", delivery=delivery)
            await self.callbacks.post(
                route.callback_url, route.secret, delivery, _body(message, delivery)
            )
        else:
            await self.host.relay(_retarget(message, where))


def _retarget(message: OutboundMessage, target: str) -> OutboundMessage:
    """The answer as a message to the chat ``target`` names, with no message there to answer
    (as a scheduled job's answer goes to its chat), keeping the hooks that record its parts on
    this request's inbox entry and the part left in doubt by a crash."""
    platform, chat_id, thread_id = parse_target(target)
    return dataclasses.replace(
        message,
        platform=platform,
        chat_id=chat_id,
        thread_id=thread_id,
        answers=(),
        outcome="",
        error="",
        usage={},
    )


async def _parse(raw: bytes, content_type: str) -> Any:
    """The verified body: JSON, or a form's ``payload`` field (GitHub's form content type)."""
    if content_type.partition(";")[0].strip().lower() == "application/x-www-form-urlencoded":
        try:
            form = dict(parse_qsl(raw.decode(), keep_blank_values=True))
        except UnicodeDecodeError:
            raise RequestError(400, "the form is not UTF-8", "invalid_body") from None
        if "payload" not in form:
            raise RequestError(400, "a form body must carry a 'payload' field", "invalid_body")
        raw = form["payload"].encode()
    if len(raw) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(loads, raw)
    return loads(raw)


def _key(event: MessageEvent) -> str:
    return f"{event.session_key} {event.message_id}"


def _body(message: OutboundMessage, delivery: str) -> dict[str, Any]:
    return {
        "delivery": delivery,
        "route": message.chat_id.partition(":")[0],
        "session": message.chat_id,
        "kind": message.kind,
        "outcome": message.outcome,
        "text": message.text,
    }


def _answered(
    message: OutboundMessage, event: MessageEvent, duplicate: bool = False
) -> web.Response:
    body = _body(message, event.message_id)
    body["status"] = "duplicate" if duplicate else "answered"
    return web.json_response(body, status=502 if message.kind == "error" else 200)


def _accepted(event: MessageEvent, later: str) -> web.Response:
    body = {"status": "accepted", "delivery": event.message_id, "answer_to": later}
    return web.json_response(body, status=202)


def _outcome(outcome: str, event: MessageEvent) -> web.Response:
    """A request that gets no answer of its own in the response, by how intake took it."""
    if outcome in ("accepted", "duplicate"):
        # a duplicate is a success to its sender: it must not deliver it again
        status = 202 if outcome == "accepted" else 200
        return web.json_response({"status": outcome, "delivery": event.message_id}, status=status)
    if outcome in ("closed", "unavailable"):  # not taken: the sender delivers it again
        raise RequestError(503, f"not taken now ({outcome}); retry", outcome)
    if outcome == "empty":
        raise RequestError(422, "the route's template rendered an empty prompt", "empty")
    if outcome == "too_long":
        raise RequestError(413, "the rendered prompt is over runner.max_input_chars", "too_long")
    raise RequestError(403, f"not taken: {outcome}", outcome)
