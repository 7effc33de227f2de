"""The live preview of a streamed answer, for every platform that can edit a message: the first
text posts one message, later text edits it at most once per interval, and the final reply takes
it over. Each platform gives its wire primitives (`PreviewWire`); `PreviewBook` keeps a platform's
live previews and those a crash left, so a replay finishes them instead of posting anew."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

import structlog

from hermes_gateway.errors import AdapterError, PermanentAdapterError, RateLimitedError
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.retry import Sleep, sleep_unless

log = structlog.get_logger("hermes.preview")
R = TypeVar("R")  # a platform's message reference: a Telegram or Discord id, a Slack ts
K = TypeVar("K", bound=Hashable)  # what a preview answers: the user's message, by platform
Remember = Callable[[MessageEvent, str], Awaitable[None]]  # where a preview is, for a replay


@dataclass(frozen=True, slots=True)
class PreviewWire(Generic[R]):
    """A platform's primitives for one preview, each a single attempt that raises an
    `AdapterError`: ``post`` sends a new message, ``edit`` replaces one's text, ``render`` turns
    the Markdown so far into what the preview shows, within the platform's limit (its first
    part, or a truncation; "" while there is nothing to show)."""

    platform: str
    post: Callable[[str], Awaitable[R]]
    edit: Callable[[R, str], Awaitable[None]]
    render: Callable[[str], str]
    interval: float = 1.0  # seconds between edits: the platforms' edit rate limits


class LivePreview(Generic[R]):
    """A `StreamSink` (`push` runs on the loop). ``adopted``: the message a run cut short by a
    crash left, continued instead of a new one (and posted anew if it is gone)."""

    def __init__(
        self,
        wire: PreviewWire[R],
        *,
        adopted: R | None = None,
        on_posted: Callable[[str], Awaitable[None]] | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wire = wire
        self.ref: R | None = adopted
        self.adopted = adopted is not None
        self.on_posted = on_posted
        self.created = clock()
        self.text = ""
        self.shown = ""
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def push(self, text: str) -> None:
        if self._closed.is_set() or not text:
            return
        self.text += text
        self._wake.set()
        if self._task is None:
            name = f"adapter:{self.wire.platform}:preview"
            self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    def tool(self, name: str, phase: str, ok: bool | None) -> None:
        """A chat's preview shows the reply's text only."""

    def close(self) -> None:
        """No more edits (one in flight completes); the preview keeps what it shows."""
        self._closed.set()
        self._wake.set()

    def cancel(self) -> None:
        """Stop at once, an edit in flight included (shutdown)."""
        self.close()
        if self._task is not None:
            self._task.cancel()

    async def finish(self, note: str = "") -> R | None:
        """`close`, then wait for an edit in flight; the preview's reference, if it was posted.
        ``note`` is appended to a preview no reply will replace (an interruption)."""
        self.close()
        if self._task is not None:
            await asyncio.gather(asyncio.shield(self._task), return_exceptions=True)
        if note and self.ref is not None:
            try:
                await self.wire.edit(self.ref, self.wire.render(self.text) + note)
            except AdapterError as exc:
                log.info(f"{self.wire.platform}.preview_failed", error=str(exc))
        return self.ref

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            if self._closed.is_set():
                return
            self._wake.clear()
            pause = await self._show()
            await sleep_unless(self._closed, max(pause, self.wire.interval), self._sleep)

    async def _show(self) -> float:
        """Show the text so far (best effort, one attempt: the final reply is what must
        arrive); returns how long the platform asked us to wait before the next edit."""
        shown = self.wire.render(self.text)
        if not shown or shown == self.shown:
            return 0.0
        platform = self.wire.platform
        try:
            if self.ref is None:
                self.ref = await self.wire.post(shown)
                if self.on_posted is not None:
                    await self.on_posted(str(self.ref))
            else:
                await self.wire.edit(self.ref, shown)
            self.shown = shown
        except RateLimitedError as exc:  # a preview is never worth a flood ban: skip edits
            log.info(f"{platform}.preview_throttled", retry_after=exc.retry_after)
            return exc.retry_after
        except PermanentAdapterError as exc:  # blocked, or the user deleted the preview
            if self.adopted:  # the preview from before the crash is gone: post a new one
                self.adopted, self.ref = False, None
                self._wake.set()
                return 0.0
            log.info(f"{platform}.preview_stopped", error=str(exc))
            self._closed.set()
        except AdapterError as exc:
            log.info(f"{platform}.preview_failed", error=str(exc))
        return 0.0


class PreviewBook(Generic[K, R]):
    """One platform's live previews by the message they answer, and the previews a crash left
    (handed over by the replay through `adopt`): the next preview or reply answering that
    message continues them. Bounded: the oldest are closed past ``most`` or ``max_age``."""

    def __init__(
        self,
        platform: str,
        remember: Remember | None = None,
        *,
        most: int = 256,
        max_age: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.platform = platform
        self.remember = remember
        self.most = most
        self.max_age = max_age
        self.clock = clock
        self._live: OrderedDict[K, LivePreview[R]] = OrderedDict()
        self._orphans: dict[K, R] = {}

    def open(self, key: K, event: MessageEvent, wire: PreviewWire[R]) -> LivePreview[R]:
        """A preview for the run answering ``event``; it continues one a crash left."""
        stale = self.clock() - self.max_age
        for old_key, old in list(self._live.items()):
            if old_key == key or old.created < stale:  # never answered
                del self._live[old_key]
                old.close()
        while len(self._live) >= self.most:
            self._live.popitem(last=False)[1].close()
        on_posted = partial(self.remember, event) if self.remember is not None else None
        preview = LivePreview(
            wire, adopted=self._orphans.pop(key, None), on_posted=on_posted, clock=self.clock
        )
        self._live[key] = preview
        return preview

    def adopt(self, key: K, ref: R) -> None:
        """``ref`` is a preview answering ``key`` that no reply has replaced yet."""
        self._orphans[key] = ref

    def pop(self, key: K) -> LivePreview[R] | None:
        return self._live.pop(key, None)

    def pop_orphan(self, key: K) -> R | None:
        return self._orphans.pop(key, None)

    async def take(self, key: K) -> R | None:
        """The preview a reply answering ``key`` takes over (finished if live), if any."""
        preview = self._live.pop(key, None)
        if preview is not None:
            ref = await preview.finish()
            if ref is not None:
                return ref
        return self._orphans.pop(key, None)

    async def into(self, key: K, ref: R, edit: Callable[[], Awaitable[None]]) -> bool:
        """Edit a reply's first part into the preview ``ref``: True when done, False when the
        preview is gone (send the part anew). A transient failure keeps ``ref`` as the orphan
        of ``key`` and raises: the redelivery edits it rather than leave it half-written."""
        try:
            await edit()
            return True
        except PermanentAdapterError as exc:
            log.info(f"{self.platform}.preview_lost", error=str(exc))
            return False
        except AdapterError:
            self._orphans[key] = ref
            raise

    async def finish_all(self, note: str = "") -> None:
        previews = list(self._live.values())
        self._live.clear()
        await asyncio.gather(*(p.finish(note) for p in previews))

    def cancel_all(self) -> None:
        for preview in self._live.values():
            preview.cancel()
        self._live.clear()
