"""A reply split into several platform messages: send only the parts an earlier attempt did not,
report each one as it goes out, and say how far a failed send got."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from hermes_gateway.errors import PartialDeliveryError, RateLimitedError, TransientAdapterError
from hermes_gateway.events import OutboundMessage

SendPart = Callable[[int, str], Awaitable[None]]  # (index in the split, text) -> None


async def send_parts(message: OutboundMessage, parts: Sequence[str], send: SendPart) -> None:
    """Send ``parts[message.skip_parts:]`` in order through ``send(index, part)``.

    After each part with more after it, awaits ``message.on_part(parts delivered)``: the
    progress is durable before the next part goes out, and a one-part reply costs nothing.
    A transient failure once any part went out (now or in an earlier attempt) is raised as
    `PartialDeliveryError`; a permanent one as it is, since no retry can help it.
    """
    total = len(parts)
    sent = min(message.skip_parts, total)
    while sent < total:
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
