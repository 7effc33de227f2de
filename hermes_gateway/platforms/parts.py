"""A reply split into several platform messages: send only the parts an earlier attempt did not,
report each one as it goes out, and say how far a failed send got."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from hermes_gateway.errors import PartialDeliveryError, RateLimitedError, TransientAdapterError
from hermes_gateway.events import OutboundMessage

P = TypeVar("P")  # a part: its text, or a file sent after the text (`Replier`)
SendPart = Callable[[int, P], Awaitable[None]]  # (index in the split, part) -> None
Anchor = Callable[[], str]  # the newest platform reference a part about to go out comes after
KEY_CHARS = 24  # fits Discord's 25-character nonce


def part_key(message: OutboundMessage, index: int, text: str) -> str | None:
    """The idempotency key of one part: the same for every attempt to send it (after a crash,
    on another instance), different for any other part; None for a message answering nothing
    (no run and no message: nothing to tell two sends of it apart by)."""
    origin = message.run_id or ",".join(message.answers)
    if not origin:
        return None
    raw = "\x1f".join((message.platform, message.chat_id, origin, message.kind, str(index), text))
    return hashlib.blake2b(raw.encode(), digest_size=KEY_CHARS // 2).hexdigest()


async def send_parts(
    message: OutboundMessage,
    parts: Sequence[P],
    send: SendPart[P],
    anchor: Anchor | None = None,
) -> None:
    """Send ``parts[message.skip_parts:]`` in order through ``send(index, part)``.

    Before each part, awaits ``message.on_sending(index, anchor())``: the intent is durable
    before the part can reach the platform, so a crash during its send leaves it recorded as
    in doubt. After each part with more after it, awaits ``message.on_part(parts delivered)``.
    A transient failure once any part went out (now or in an earlier attempt) is raised as
    `PartialDeliveryError`; a permanent one as it is, since no retry can help it.
    """
    total = len(parts)
    sent = min(message.skip_parts, total)
    while sent < total:
        if message.on_sending is not None:
            await message.on_sending(sent, anchor() if anchor is not None else "")
        try:
            await send(sent, parts[sent])
        except (TransientAdapterError, RateLimitedError) as exc:
            if sent == 0:
                raise
            detail = f"{exc} (after {sent} of {total} parts)"
            raise PartialDeliveryError(detail, sent) from exc
        sent += 1
        if sent < total and message.on_part is not None:
            await message.on_part(sent)
