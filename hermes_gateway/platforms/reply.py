"""The reply skeleton every chat platform shares: a reply's parts go out in order, the first one
taking over the live preview that answered its message, and a part a crash left in doubt asked
after before it is sent again. A platform gives only its wire primitives (`ReplyWire`)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Generic, Protocol, TypeVar

from hermes_gateway.events import OutboundMessage
from hermes_gateway.platforms.parts import part_key, send_parts
from hermes_gateway.platforms.preview import PreviewBook

R = TypeVar("R")  # a platform's message reference: a Telegram or Discord id, a Slack ts
K = TypeVar("K", bound=Hashable)  # what a preview answers, as its platform's `PreviewBook` keys it
Ref = TypeVar("Ref", contravariant=True)  # the reference a wire edits


class ReplyWire(Protocol[Ref]):
    """One reply's primitives on its platform; each raises an `AdapterError` and does its own
    retries, as a part's send must."""

    def after(self) -> str:
        """The newest platform reference the next part comes after ("" when none is known):
        recorded with the part's intent, it is where `sent` looks after a crash."""
        ...

    async def post(self, index: int, part: str, key: str | None) -> None:
        """Send part ``index`` as a new message. ``key`` is its idempotency key (the same for
        every attempt to send this part, None for a message answering nothing), for a
        platform that can keep one with the message."""
        ...

    async def edit(self, ref: Ref, part: str) -> None:
        """Replace the text of the preview ``ref`` with the reply's first part."""
        ...

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        """Whether this part, left in doubt by a crash during its send, went out after
        ``after``. False when unsure: the part is then sent again, since a doubled part is
        better than a lost one."""
        ...


@dataclass(frozen=True, slots=True)
class PreviewRef(Generic[K, R]):
    """The live preview a reply takes over (the platform chooses which): ``ref`` in its
    `PreviewBook` under ``key``, where it stays for the redelivery if editing it fails for now."""

    key: K
    ref: R


class Replier(Generic[K, R]):
    """Sends one platform's replies through its wire, over its book of live previews."""

    def __init__(self, previews: PreviewBook[K, R]) -> None:
        self.previews = previews

    async def send(
        self,
        message: OutboundMessage,
        parts: Sequence[str],
        wire: ReplyWire[R],
        preview: PreviewRef[K, R] | None = None,
    ) -> None:
        """Each part of ``parts`` not sent by an earlier attempt, once: the first edited into
        ``preview`` (posted anew if the preview is gone), the one in doubt (`message.doubt`)
        looked up first and not sent twice, the others posted. How far it got, and a failure
        part-way, are reported as `send_parts` says."""

        async def one(index: int, part: str) -> None:
            if index == 0 and preview is not None:
                edit = partial(wire.edit, preview.ref, part)
                if await self.previews.into(preview.key, preview.ref, edit):
                    return
            key = part_key(message, index, part)
            doubt = message.doubt if index == message.skip_parts else None
            if doubt is not None and await wire.sent(part, key, doubt):
                return  # it went out before the crash: not twice
            await wire.post(index, part, key)

        await send_parts(message, parts, one, wire.after)
