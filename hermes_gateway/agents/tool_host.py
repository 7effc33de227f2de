"""The gateway's services for tools: approvals asked in the chat, past-message search,
attachment downloads, the vision model and files sent with the answer, as plain synchronous
callables for worker threads.

Each callable hops to the event loop with `run_coroutine_threadsafe(...).result(timeout)`: the
worker thread blocks, the loop never does, and no coroutine here waits on the run pool, so a
full pool cannot deadlock. An approval is answered only by `/approve` or `/deny` arriving as
a real inbound message of the same session (`Commands`) from the user whose message started the
run (in a shared thread, no other participant); nothing a tool or the model writes reaches that
path.
"""

from __future__ import annotations

import asyncio
import mimetypes
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agent_core import LLMClient, ModelError
from hermes_gateway.errors import AdapterError, JobRequestError
from hermes_gateway.events import FileKind, MessageEvent, OutboundFile, OutboundMessage
from hermes_gateway.memory.scope import sole_user
from hermes_gateway.platform_spec import capabilities, megabytes, platform_spec
from hermes_gateway.thread_hop import hop
from tools.approval import CANNOT_ASK
from tools.errors import ToolError
from tools.host import ApprovalRequest, BrowserRequest, BrowserResult, SearchHit, ToolHost

if TYPE_CHECKING:
    from hermes_gateway.browser.pool import BrowserPool
    from hermes_gateway.core.delivery import Delivery
    from hermes_gateway.core.run import LiveRuns
    from hermes_gateway.platforms.adapter import Adapter
    from hermes_gateway.scheduler.job_service import JobService
    from hermes_gateway.store.store import Store

log = structlog.get_logger("hermes.tools")
HOP_TIMEOUT_S = 30.0
ASK = (
    "{who}'s command needs approval ({reason}):\n```\n{action}\n```\n"
    "Only {who} can reply /approve to run it or /deny to refuse it; no answer within "
    "{timeout:g} s counts as denied."
)
REFUSED = "Only {who} can answer this approval request ({who}'s command); nothing changed."
ACTION_CHARS = 600
_MD_SPECIAL = re.compile(r"([\\`*_~\[\]()<>#|!])")
# shown as escapes so the user sees what would run: control characters, direction overrides
# and zero-width characters can make a command look like another one
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
TIMED_OUT = "No answer to the approval request within {timeout:g} s: not run."


@dataclass(eq=False)
class Ticket:
    """One open approval request; `done` is set on the loop thread, read on the worker."""

    request: ApprovalRequest
    event: MessageEvent
    asked_at: float = field(default_factory=time.monotonic)
    approved: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def plain(text: str) -> str:
    """Text shown as itself in any platform's rendering of Markdown (no link, no emphasis)."""
    return _MD_SPECIAL.sub(r"\\\1", _HIDDEN.sub(_escape_hidden, text))


def who(event: MessageEvent) -> str:
    """``@alice``: the user's name (or id) as plain text, one line, bounded."""
    name = " ".join((event.user_name or event.user_id).split())[:64]
    return "@" + plain(name.lstrip("@"))


def shown_action(action: str) -> str:
    """The command for a code block: bounded, no fence in it, hidden characters made visible."""
    if len(action) > ACTION_CHARS:
        action = f"{action[:ACTION_CHARS]}\n[... {len(action) - ACTION_CHARS} more characters]"
    return re.sub(r"`{3,}", lambda m: "'" * len(m.group()), _HIDDEN.sub(_escape_hidden, action))


def _escape_hidden(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


class GatewayToolHost:
    """Lends the tools the services below (each a method named as its `ToolHost` field, found
    there by `ToolHost.provided_by`); owns the open approval requests."""

    def __init__(
        self,
        *,
        runs: LiveRuns,
        delivery: Delivery,
        store: Store,
        adapters: dict[str, Adapter],
        vision: LLMClient,
        approval_timeout_s: float,
        jobs: JobService | None = None,
        browser: BrowserPool | None = None,
    ) -> None:
        self.runs = runs
        self.delivery = delivery
        self.store = store
        self.adapters = adapters
        self.vision = vision
        self.approval_timeout_s = approval_timeout_s
        self.pending: dict[str, Ticket] = {}  # session_key -> ticket; loop thread only
        self.jobs = jobs  # the scheduler's, when scheduler.enabled
        self.browser = browser  # when a browser_* tool is enabled
        self._loop: asyncio.AbstractEventLoop | None = None
        self.host = ToolHost.provided_by(self)  # the `ToolHost` services named as methods here

    def browse(self, request: BrowserRequest, should_stop: Callable[[], bool]) -> BrowserResult:
        """One browser action, on the browser's own thread (`BrowserPool.browse`); without a
        browser (no `browser_*` tool enabled) it answers as if not lent."""
        if self.browser is None:
            raise ToolError("no browser is available here")
        return self.browser.browse(request, should_stop)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def end_browser(self, session_key: str) -> None:
        """`/stop` and `/new`: the session's page closes (it does not wait)."""
        if self.browser is not None:
            self.browser.end_session(session_key)

    async def close(self) -> None:
        """At shutdown: the browser process ends (off the loop: it waits for it)."""
        if self.browser is not None:
            await asyncio.to_thread(self.browser.close)

    def _hop(self, coro: Any) -> Any:
        return hop(self._loop, coro, HOP_TIMEOUT_S, "the gateway did not answer in time")

    # -- approvals ------------------------------------------------------------------------

    def ask_approval(self, request: ApprovalRequest, should_stop: Callable[[], bool]) -> bool:
        ticket: Ticket | None = self._hop(self._open(request))
        if ticket is None:
            raise ToolError(CANNOT_ASK)
        deadline = time.monotonic() + self.approval_timeout_s
        timed_out = False
        while not ticket.done.wait(0.1):
            if should_stop():
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self._close(ticket, timed_out), loop)
            except RuntimeError:
                pass
        return ticket.done.is_set() and ticket.approved

    async def _open(self, request: ApprovalRequest) -> Ticket | None:
        event = self.runs.current_event(request.session_key)
        if event is None or not capabilities(event.platform).can_ask_approval:
            # nobody to ask: the run is gone, or the platform has no channel for questions
            log.info("approval.cannot_ask", session_key=request.session_key, tool=request.tool)
            return None
        ticket = Ticket(request, event)
        old = self.pending.pop(request.session_key, None)
        if old is not None:
            old.done.set()  # superseded: denied
        self.pending[request.session_key] = ticket
        text = ASK.format(
            who=who(event),
            action=shown_action(request.action),
            reason=plain(request.reason),
            timeout=self.approval_timeout_s,
        )
        out = OutboundMessage.to(event, text, "notice", answers=())  # a question: settles nothing
        log.info("approval.asked", session_key=request.session_key, reason=request.reason)
        if not await self.delivery.send(out, [], outcome="approval", event=event):
            self.pending.pop(request.session_key, None)
            return None
        return ticket

    async def _close(self, ticket: Ticket, timed_out: bool) -> None:
        key = ticket.request.session_key
        if self.pending.get(key) is ticket:
            del self.pending[key]
        if timed_out and not ticket.done.is_set():
            ticket.done.set()
            event = ticket.event
            text = TIMED_OUT.format(timeout=self.approval_timeout_s)
            await self.delivery.send(OutboundMessage.to(event, text, "notice"), [], event=event)

    def answer(self, event: MessageEvent, approved: bool) -> tuple[str, Ticket | None]:
        """`/approve` or `/deny` from a user of the session (loop thread): ``("none", None)``
        when nothing is waiting, ``("refused", ticket)`` when the sender is not the user whose
        message started the run (a shared thread: the ticket stays open), else
        ``("answered", ticket)``."""
        ticket = self.pending.get(event.session_key)
        if ticket is None:
            return "none", None
        asker = ticket.event
        if (event.platform, event.user_id) != (asker.platform, asker.user_id):
            log.warning(
                "approval.refused",
                session_key=event.session_key,
                user_id=event.user_id,
                owner_id=asker.user_id,
            )
            return "refused", ticket
        del self.pending[event.session_key]
        ticket.approved = approved
        ticket.done.set()
        log.info(
            "approval.answered",
            session_key=event.session_key,
            approved=approved,
            user_id=event.user_id,
            seconds=round(time.monotonic() - ticket.asked_at, 2),
        )
        return "answered", ticket

    # -- scheduled jobs -------------------------------------------------------------------

    def manage_jobs(self, session_key: str, request: Mapping[str, Any]) -> str:
        if self.jobs is None:
            raise ToolError("scheduled jobs are off (scheduler.enabled in the config)")
        text: str = self._hop(self._manage_jobs(self.jobs, session_key, dict(request)))
        return text

    async def _manage_jobs(
        self, jobs: JobService, session_key: str, request: dict[str, Any]
    ) -> str:
        try:  # the chat and user come from the run, never from the model's arguments
            return await jobs.from_tool(session_key, self.runs.current_event(session_key), request)
        except JobRequestError as exc:
            raise ToolError(str(exc)) from None

    # -- search, attachments, vision ------------------------------------------------------

    def search_history(self, session_key: str, query: str, limit: int) -> list[SearchHit]:
        hits = self._hop(self._search(session_key, query, limit))
        return [SearchHit(h.created_at, h.role, h.snippet, h.current) for h in hits]

    async def _search(self, session_key: str, query: str, limit: int) -> list[Any]:
        """In a session several users share (a thread), only the asking user's turns."""
        event = self.runs.current_event(session_key)
        if event is None:
            raise ToolError("no user is known for this conversation right now")
        user = None if sole_user(event) else event.user_id
        return await self.store.search_messages(session_key, query, limit, user)

    def fetch_attachment(self, session_key: str, number: int) -> Path:
        path: Path = self._hop(self._download(session_key, number))
        return path

    async def _download(self, session_key: str, number: int) -> Path:
        events = self.runs.current_messages(session_key)
        images = [
            a
            for e in events
            for a in e.attachments
            if a.kind == "image" or a.mime_type.startswith("image/")
        ]
        if not 1 <= number <= len(images):
            raise ToolError(f"the user's message has {len(images)} image(s); no image {number}")
        attachment = images[number - 1]
        if attachment.path:
            return Path(attachment.path)
        adapter = self.adapters.get(events[-1].platform) if events else None
        download = getattr(adapter, "download", None)
        if download is None:
            raise ToolError("attachments from this platform cannot be fetched yet")
        try:
            fetched: Path = await download(attachment)
        except AdapterError as exc:
            raise ToolError(f"the attachment could not be fetched: {exc}") from None
        return fetched

    def describe_image(self, prompt: str, data_url: str, should_stop: Callable[[], bool]) -> str:
        message = {
            "role": "user",
            "content": [
                {"type": "text", "text": prompt},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        }
        try:
            completion = self.vision.complete([message], None, should_stop=should_stop)
        except ModelError as exc:
            raise ToolError(f"the vision model failed: {exc.user_message}") from None
        if completion.interrupted:
            raise ToolError("interrupted by the user")
        return completion.content

    # -- files sent with the answer -------------------------------------------------------

    def send_file(self, session_key: str, path: Path, caption: str) -> str:
        try:
            size = path.stat().st_size  # the tool has just opened it: a regular file
        except OSError as exc:  # removed since
            raise ToolError(f"{path.name} cannot be read: {exc.strerror}") from None
        file = OutboundFile(str(path), path.name, caption, file_kind(path.name))
        sent: str = self._hop(self._attach(session_key, file, size))
        return sent

    async def _attach(self, session_key: str, file: OutboundFile, size: int) -> str:
        """Checked against the platform's limit now, so the model can make it smaller; checked
        again when it is sent (it may have grown)."""
        target = self.runs.attach_check(session_key)
        if target is None:
            raise ToolError("no chat answer is being written here right now")
        platform = target.platform
        if platform is None:
            raise ToolError("this scheduled job delivers its answer to no chat: no file can go")
        spec = platform_spec(platform)
        limit = spec.limits.upload_bytes if spec is not None else None
        if limit is None:
            raise ToolError(f"{platform} does not take files from me")
        if size > limit:
            raise ToolError(
                f"{file.name} is {megabytes(size)}; {platform} takes files up to "
                f"{megabytes(limit)}: make it smaller (compress, split, fewer pages)"
            )
        self.runs.attach(session_key, file)
        log.info("tool.file_attached", session_key=session_key, bytes=size, kind=file.kind)
        return (
            f"{file.name} ({size} bytes) will be sent after your answer's text, as it is then "
            f"(do not change it meanwhile). {target.note}"
        ).rstrip()


def file_kind(name: str) -> FileKind:
    """How a platform shows a file, by its name: an image it can display, audio, a voice note
    (Ogg/Opus), or a document."""
    mime = mimetypes.guess_type(name)[0] or ""
    if mime in ("image/jpeg", "image/png", "image/gif", "image/webp"):
        return "image"
    if mime in ("audio/ogg", "audio/opus"):
        return "voice"
    if mime.startswith("audio/"):
        return "audio"
    return "document"
