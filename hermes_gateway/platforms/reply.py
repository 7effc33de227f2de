"""The reply skeleton every chat platform shares: a reply's parts go out in order, the first one
taking over the live preview that answered its message, then its files (`send_file`), one part
each; a part a crash left in doubt is asked after before it is sent again. A platform gives only
its wire primitives (`ReplyWire`, and `UploadWire` for one that takes files)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Generic, Protocol, TypeVar, runtime_checkable

import structlog

from hermes_gateway.events import OutboundFile, OutboundMessage
from hermes_gateway.platform_spec import platform_spec
from hermes_gateway.platforms.outfile import read_outbound
from hermes_gateway.platforms.parts import part_key, send_parts
from hermes_gateway.platforms.preview import PreviewBook
from hermes_gateway.platforms.retry import tallied
from hermes_gateway.traces import Attr, SpanHandle, Tracer, active

log = structlog.get_logger("hermes.platforms")
NOT_SENT = "(I could not send the file {name}: {why}.)"

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
class Upload:
    """One file part as it goes out: what the model asked to send, and its bytes as read now."""

    file: OutboundFile
    data: bytes = b""


@runtime_checkable
class UploadWire(ReplyWire[Ref], Protocol[Ref]):
    """A reply's wire on a platform that takes files: each file goes as a native upload."""

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        """Send file part ``index`` as a new message, with its caption."""
        ...

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        """The sent-check of a file part in doubt, as `ReplyWire.sent` is for text."""
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
        part-way, are reported as `send_parts` says. The message's files follow its text,
        each a part of its own (its own intent), read when it is sent."""

        alone = len(parts) + len(message.files) == 1

        async def one(index: int, part: str | OutboundFile) -> None:
            with _part_span(index, part, alone) as span:
                span.set(
                    "hermes.reply.outcome", await self._part(message, index, part, wire, preview)
                )

        items: list[str | OutboundFile] = [*parts, *message.files]
        await send_parts(message, items, one, wire.after)

    async def _part(
        self,
        message: OutboundMessage,
        index: int,
        part: str | OutboundFile,
        wire: ReplyWire[R],
        preview: PreviewRef[K, R] | None,
    ) -> str:
        """Send one part; how it went out: edited (into the preview), posted, present (it
        went out before a crash), uploaded, or noted (a file's line in its place)."""
        if isinstance(part, OutboundFile):
            return await self._file(message, index, part, wire)
        if index == 0 and preview is not None:
            edit = partial(wire.edit, preview.ref, part)
            if await self.previews.into(preview.key, preview.ref, edit):
                return "edited"
        key = part_key(message, index, part)
        doubt = message.doubt if index == message.skip_parts else None
        if doubt is not None and await wire.sent(part, key, doubt):
            return "present"  # it went out before the crash: not twice
        await wire.post(index, part, key)
        return "posted"

    async def _file(
        self, message: OutboundMessage, index: int, file: OutboundFile, wire: ReplyWire[R]
    ) -> str:
        """Upload one file, or, when it cannot go (gone, grown over the limit, a platform that
        takes no files), a line in its place saying so: the user learns what is missing."""
        spec = platform_spec(message.platform)
        limit = spec.limits.upload_bytes if spec is not None else None
        doubt = message.doubt if index == message.skip_parts else None
        if limit is None or not isinstance(wire, UploadWire):
            got: bytes | str = "this platform does not take files from me"
        else:
            got = await asyncio.to_thread(read_outbound, file, limit)
        if isinstance(got, str):
            log.warning("reply.file_not_sent", platform=message.platform, why=got)
            line = NOT_SENT.format(name=file.name, why=got)
            key = part_key(message, index, line)
            if doubt is None or not await wire.sent(line, key, doubt):
                await wire.post(index, line, key)
            return "noted"
        assert isinstance(wire, UploadWire)
        upload = Upload(file, got)
        key = part_key(message, index, f"\x00{file.path}\x00{file.caption}")
        if doubt is not None and await wire.uploaded(upload, key, doubt):
            return "present"  # it went out before the crash: not twice
        await wire.upload(index, upload, key)
        return "uploaded"


class _Current:
    """The current span (the delivery's `reply.send`) as a part's: a reply in one part."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def set(self, key: str, value: Attr) -> None:
        self.tracer.annotate(key, value)


@contextmanager
def _part_span(index: int, part: str | OutboundFile, alone: bool) -> Iterator[SpanHandle]:
    """One part's `reply.part` span (a child of the delivery's `reply.send`): its index, size
    and what its platform calls' retries cost. Sizes only: never the part's text. A reply in
    one part has none (a span a message saved): its `reply.send` carries the same."""
    tracer = active()
    attrs: dict[str, Attr] = {"hermes.reply.part": index}
    if isinstance(part, OutboundFile):
        attrs["hermes.reply.file_kind"] = part.kind
    else:
        attrs["hermes.reply.chars"] = len(part)
    spanned = nullcontext(_Current(tracer)) if alone else tracer.span("reply.part", attrs)
    with spanned as span, tallied() as tally:
        try:
            yield span
        finally:
            span.set("hermes.reply.retries", tally.retries)
            span.set("hermes.reply.rate_limited", tally.rate_limited)
            span.set("hermes.reply.waited_ms", round(tally.waited_s * 1000))
