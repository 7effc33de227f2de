"""The local API's wire shapes: reading a chat-completions request (messages, images, the
session it names) and writing OpenAI-style completions, chunks, usage and error statuses."""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_gateway.platforms import Attachment, OutboundMessage, RequestError, without_surrogates

_SESSION_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@")
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_DATA_MIME = re.compile(r"data:([\w.+-]+/[\w.+-]+)[;,]")
NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


@dataclass(frozen=True, slots=True)
class Ended:
    """How a request ends when no reply of its own comes: ``interrupted`` (a newer message in
    the same session took over) or ``shutting_down`` (the gateway is stopping). ``run_id`` and
    ``usage`` are of the run that was cut short, when it is known (a run abandoned while it
    waited on the model never reported its usage)."""

    why: str
    run_id: str = ""
    usage: tuple[tuple[str, int], ...] = ()


def session_name(value: Any) -> str:
    name = str(value)
    if not name or len(name) > 128 or not set(name) <= _SESSION_CHARS:
        raise RequestError(
            400, "'user' must be 1-128 characters of letters, digits and -_.@", "invalid_user"
        )
    return name


def last_user_message(body: dict[str, Any]) -> tuple[str, tuple[Attachment, ...]]:
    """The new message: its text (a note per image, so an image alone is not "empty") and
    its images as attachments."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty array", "invalid_messages")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise RequestError(400, "the last message must have role 'user'", "invalid_messages")
    text, images = _content(last.get("content"))
    attachments = tuple(
        Attachment(kind="image", name=f"image {n}", url=url, mime_type=_mime(url))
        for n, url in enumerate(images, 1)
    )
    notes = "\n".join(f"[attached image {n}]" for n in range(1, len(images) + 1))
    text = f"{text}\n\n{notes}" if text.strip() and notes else (text if text.strip() else notes)
    if not text.strip():
        raise RequestError(400, "the message is empty", "empty_message")
    return without_surrogates(text), attachments


IGNORED_NOTE = (
    "with `user` set the gateway keeps this session's history and system prompt; "
    "only the last message was used"
)


def ignored_parts(body: dict[str, Any]) -> tuple[str, ...]:
    """What a request naming its session sent besides its new message, which the gateway does
    not use: "system" when a system prompt was among it, and the range of those messages."""
    messages = body.get("messages")
    earlier = messages[:-1] if isinstance(messages, list) else []
    if not earlier:
        return ()
    roles = {m.get("role") for m in earlier if isinstance(m, dict)}
    system = ("system",) if roles & {"system", "developer"} else ()
    return (*system, f"messages[0..{len(earlier) - 1}]")


def hermes_field(kind: str, run_id: str, ignored: tuple[str, ...]) -> dict[str, Any]:
    """The response's `hermes` object: how the turn ended, its run, and what was ignored."""
    extra: dict[str, Any] = {"kind": kind, "run_id": run_id}
    if ignored:
        extra["ignored"] = list(ignored)
        extra["note"] = IGNORED_NOTE
    return extra


def client_history(body: dict[str, Any]) -> tuple[dict[str, str], ...]:
    """Every message before the last, as the history of a stateless request (the client's
    own system prompt included); images in earlier turns become a note."""
    history = []
    for message in body["messages"][:-1]:
        role = _ROLES.get(str(message.get("role"))) if isinstance(message, dict) else None
        if role is None:
            raise RequestError(
                400,
                "earlier messages must have role system, developer, user or assistant "
                "(the gateway runs its own tools)",
                "invalid_messages",
            )
        text, images = _content(message.get("content"))
        if images:
            text = f"{text}\n[{len(images)} image(s) not kept]".strip()
        history.append({"role": role, "content": without_surrogates(text)})
    return tuple(history)


def _content(content: Any) -> tuple[str, list[str]]:
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise RequestError(400, "message content must be a string or parts", "invalid_messages")
    texts, images = [], []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or not url:
                raise RequestError(400, "an image_url part has no url", "invalid_messages")
            images.append(url)
        else:
            raise RequestError(
                400, "content parts must be of type text or image_url", "invalid_messages"
            )
    return "\n".join(texts), images


def _mime(url: str) -> str:
    found = _DATA_MIME.match(url)
    return found.group(1) if found else ""


def save_data_url(url: str, folder: Path) -> Path:
    """An inline image (``data:image/png;base64,...``) written to a private file in ``folder``
    (blocking: run off the loop). Raises ValueError for anything else: a client's link is not
    fetched on its behalf."""
    head, sep, data = url.partition(",")
    if not (sep and head.startswith("data:") and head.endswith(";base64")):
        raise ValueError("only inline images (data: URLs, base64) can be read")
    try:
        raw = base64.b64decode(data, validate=True)
    except binascii.Error:
        raise ValueError("the inline image is not valid base64") from None
    subtype = re.sub(r"[^a-z0-9]", "", _mime(url).partition("/")[2].lower())[:8] or "bin"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"api-{secrets.token_hex(8)}.{subtype}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(raw)
    return path


def usage_of(reply: OutboundMessage | Ended) -> dict[str, int]:
    used = dict(reply.usage)
    usage = {k: int(used.get(k, 0)) for k in NO_USAGE}
    if not usage["total_tokens"]:
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


def failure(reply: OutboundMessage | Ended) -> RequestError | None:
    """The HTTP error a reply stands for, or None for a reply (an answer or a notice).

    Chat platforms show these as one line of text; an API client gets a status its SDK
    raises on: 503 no model or the gateway stopping, 502 the model failed, 504 it timed out,
    500 a crash, 429 the session's queue is full; in a cluster 502 when the instance running
    the session cannot be reached, 409 when it runs elsewhere and cannot be carried there.
    """
    if isinstance(reply, Ended):
        if reply.why == "shutting_down":
            return RequestError(503, "the gateway is shutting down; retry", "shutting_down")
        return None
    if reply.outcome == "failed":
        if reply.error == "model not configured":
            return RequestError(503, reply.text, "model_not_configured")
        if "did not answer within" in reply.text:
            return RequestError(504, reply.text, "model_timeout")
        return RequestError(502, reply.text, "model_error")
    if reply.outcome == "queue_full":
        return RequestError(429, reply.text, "queue_full")
    if reply.outcome == "owned_elsewhere":  # cluster mode: its session runs elsewhere
        return RequestError(409, reply.text, "session_busy_elsewhere")
    if reply.outcome == "owner_unreachable":  # cluster mode: carried, but not answered
        return RequestError(502, reply.text, "owner_unreachable")
    if reply.kind == "error":
        unavailable = ("store_unavailable", "coordination_unavailable")
        status = 503 if reply.outcome in unavailable else 500
        return RequestError(status, reply.text, reply.outcome or "internal_error")
    return None


def completion(
    reply: OutboundMessage | Ended, model: str, chat_id: str, ignored: tuple[str, ...] = ()
) -> dict[str, Any]:
    if isinstance(reply, Ended):
        text, kind, run_id, usage = "", reply.why, reply.run_id, usage_of(reply)
    else:
        text, kind, run_id, usage = reply.text, reply.kind, reply.run_id, usage_of(reply)
    extra = hermes_field(kind, run_id, ignored)
    if isinstance(reply, OutboundMessage) and reply.files:
        extra["files"] = file_links(reply)
    return {
        "id": chat_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
        "hermes": extra,
    }


def file_links(message: OutboundMessage) -> list[dict[str, str]]:
    """The answer's files (`send_file`) as the `hermes` object shows them: the URL path on the
    control port its client fetches each from (`adapters.api.files`)."""
    return [
        {"name": f.name, "url": f.path, "caption": f.caption, "kind": f.kind} for f in message.files
    ]


def chunk(
    chat_id: str, model: str, delta: dict[str, Any], finish: str | None = None
) -> dict[str, Any]:
    return {
        "id": chat_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def error_body(exc: RequestError) -> dict[str, Any]:
    kind = "invalid_request_error" if exc.status < 500 else "server_error"
    return {"error": {"message": str(exc), "type": kind, "param": None, "code": exc.code}}
