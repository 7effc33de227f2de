"""The adapter seam: what a platform adapter implements, what the gateway offers it, and the
import of an enabled platform's adapter through its `PlatformSpec`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from aiohttp import web

from hermes_gateway.events import MessageEvent, OutboundMessage, Sender
from hermes_gateway.platform_spec import load_ref, platform_spec
from hermes_gateway.platforms.peers import Peers

if TYPE_CHECKING:
    from hermes_gateway.config import Config
    from hermes_gateway.core.bus import EventBus
    from hermes_gateway.metrics import Metrics

# "refused": admission said no (a stranger, a bot, a group message not addressed to the bot);
# any reply the access rules give was already sent. "unavailable": the store cannot write, so
# a durable submit did not take the message; its platform must keep it (no offset, ack or 200)
# and offer it again once `writable()` returns
SubmitOutcome = Literal[
    "accepted", "refused", "duplicate", "empty", "too_long", "closed", "unavailable"
]


# who may call a route on the control server: "operator" (the default) always wants the control
# token; "client" (the local chat API) wants it only when `control.token` is configured, so on
# a loopback bind curl and OpenAI clients work as they are; "public" never (webhooks, which
# check their platform's own secret, and health probes)
RouteAccess = Literal["operator", "client", "public"]


# an adapter's last step before a message it submitted is taken (see `AdapterHost.submit`)
Admitted = Callable[[MessageEvent], Awaitable[MessageEvent]]


@dataclass(frozen=True, slots=True)
class Health:
    """Whether an adapter is connected and taking messages, and if not, why."""

    ready: bool
    detail: str = ""


@runtime_checkable
class StreamSink(Protocol):
    """Receives a run's progress as it happens (API SSE, preview-by-edit), on the loop and in
    the order it happened: the text the model produces, and the tools the run calls."""

    def push(self, text: str) -> None: ...

    def tool(self, name: str, phase: str, ok: bool | None) -> None:
        """A tool started (``phase`` "start") or ended ("end"; ``ok`` says how)."""
        ...


class Leadership(Protocol):
    """Work only one instance of a cluster may do at a time (one poller per bot token). On
    one process this instance always leads; in a cluster it is a leader lease."""

    @property
    def leading(self) -> bool: ...

    async def acquire(self) -> None:
        """Return once this instance leads (waits while another instance does)."""
        ...

    def remaining(self) -> float:
        """Seconds of work that surely end while this instance still leads: bound each step
        (a long poll) by it; 0 when not leading, infinite on one process."""
        ...

    async def lost(self) -> None:
        """Return once leading was lost (a renewal refused, or its deadline passed)."""
        ...

    async def release(self) -> None:
        """Stop leading, so a stand-by takes over at once (idempotent)."""
        ...


class Shares(Protocol):
    """Numbered parts of a platform's intake (Discord shards) that a cluster's instances split:
    this instance serves the parts in `held`. On one process it holds them all, always."""

    count: int
    everything: bool  # one process: `held` is every part and never changes
    held: frozenset[int]

    async def start(self) -> None:
        """Begin taking parts (returns at once; `changed` reports what was taken)."""
        ...

    async def changed(self) -> None:
        """Return once `held` changed (a part taken, given back or lost)."""
        ...

    async def release(self) -> None:
        """Give every part up, so the other instances take them at once."""
        ...

    async def note(self, n: int, values: Mapping[str, str], keep_s: float) -> None:
        """Keep ``values`` for part ``n``'s next holder (replacing what was kept), for
        ``keep_s`` after this write; nothing on one process. Raises
        `CoordinationUnavailable`."""
        ...

    async def notes(self, n: int) -> dict[str, str]:
        """What the last holder of part ``n`` kept for it (empty on one process). Raises
        `CoordinationUnavailable`."""
        ...

    async def gate(self, name: str, ttl_s: float) -> float:
        """Pass the gate ``name`` shared by every instance (e.g. one IDENTIFY at a time), which
        then stays shut ``ttl_s``: 0.0 if passed, else the seconds until it opens; always
        0.0 on one process. Raises `CoordinationUnavailable`."""
        ...

    async def agree(self) -> int:
        """The part count every instance uses: the first instance's, kept in the coordination
        store while an instance with that count runs (`count` on one process); a caller
        whose `count` differs must not take parts. Raises `CoordinationUnavailable`."""
        ...


class AdapterHost(Protocol):
    """What the gateway gives an adapter."""

    bus: EventBus
    metrics: Metrics
    peers: Peers | None  # the other instances of a cluster; None on one process

    @property
    def config(self) -> Config:
        """The config in force, read at each use: a SIGHUP reload changes it (access rules,
        log level), so an adapter keeps no section of it."""
        ...

    async def submit(
        self,
        event: MessageEvent,
        *,
        durable: bool = False,
        sender: Sender = "user",
        admitted: Admitted | None = None,
    ) -> SubmitOutcome:
        """Hand over a normalized inbound message (persisted before this returns). The core
        admits it first (allow lists, pairing, mention gating; ``sender`` says whether the
        bot itself or another bot wrote it), so an adapter never checks access itself;
        ``admitted`` runs once it is let in, before it is taken (a slash command is
        acknowledged there), and returns the event to take. When the store cannot write:
        ``durable`` (a platform that redelivers what it was not told is taken) answers
        "unavailable"; otherwise the message is answered unpersisted."""
        ...

    async def writable(self) -> None:
        """Return once the store can take new messages (at once when it can)."""
        ...

    def add_route(
        self,
        method: str,
        path: str,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
        *,
        access: RouteAccess = "operator",
    ) -> None:
        """Mount an HTTP handler on the control server (webhooks, the local API); see
        `RouteAccess`: ``public`` routes skip the control token because they authenticate
        themselves, ``client`` ones are the local chat API."""
        ...

    async def history(self, session_key: str) -> list[dict[str, Any]]:
        """The session's conversation so far."""
        ...

    def leadership(self, role: str, slots: int = 0) -> Leadership:
        """The leadership of ``role`` (e.g. "telegram-poller:<bot id>") in the cluster; with
        ``slots``, any one of the leases ``role:0`` .. ``role:<slots-1>`` (at most that many
        instances lead at once)."""
        ...

    def shares(self, role: str, count: int) -> Shares:
        """The parts ``<role>:<n>`` (n < ``count``) this instance serves in the cluster."""
        ...

    async def remember_preview(self, event: MessageEvent, ref: str) -> None:
        """Keep where the live preview answering ``event`` is (a message id, a Slack ts), so
        the replay after a crash can finish it (`PreviewResumer`); never raises."""
        ...

    async def relay(self, message: OutboundMessage) -> None:
        """Send ``message`` through the adapter of its own platform (``message.platform``), as
        a scheduled job's answer goes to its chat: for a platform whose answers go to a chat
        elsewhere (the webhook's ``deliver``). Its intent and progress hooks are the caller's,
        so the caller's inbox entry records how far it got. Raises `PermanentAdapterError`
        when that platform is not running, else what its adapter's `send` raises."""
        ...


@runtime_checkable
class Adapter(Protocol):
    """One platform: SDK updates in as `MessageEvent`s, `OutboundMessage`s out as SDK calls."""

    name: str

    async def start(self) -> None:
        """Connect and begin intake; network failures are retried in the background."""
        ...

    async def stop(self) -> None:
        """Stop intake and close connections."""
        ...

    async def send(self, message: OutboundMessage) -> None:
        """Deliver one message (formatting, splitting and retries included); raise an
        `AdapterError` when it cannot be delivered."""
        ...

    def health(self) -> Health: ...

    def stream(self, event: MessageEvent) -> StreamSink | None:
        """A sink for the streamed text of the run answering ``event``, or None."""
        ...


@runtime_checkable
class PreviewResumer(Protocol):
    """An adapter whose live previews can be finished after a crash."""

    def adopt_preview(self, event: MessageEvent, ref: str) -> None:
        """``ref`` is a preview that a run answering ``event`` left half-written: the next
        preview or reply for ``event`` continues that message instead of posting a new one
        (and posts anew if it is gone)."""
        ...


@runtime_checkable
class ReplyResumer(Protocol):
    """An adapter that keeps how to answer a message in its `MessageEvent.reply_context`."""

    def resume_reply(self, event: MessageEvent) -> None:
        """``event`` came back from the inbox after a restart and is about to be answered:
        answer it the way its `reply_context` says while that still works (a Discord
        interaction whose token lives), else as a plain reply."""
        ...


def adapter_class(name: str) -> Any:
    """Import an adapter's class, named by its platform's spec: only an enabled platform's
    SDK is imported (blocking: a few hundred ms, so the gateway calls this on a worker
    thread)."""
    spec = platform_spec(name)
    if spec is None:
        raise KeyError(f"no platform named {name!r} is installed")
    return load_ref(spec.adapter)


def load_adapter(name: str, host: AdapterHost, cls: Any = None) -> Adapter:
    adapter: Adapter = (cls or adapter_class(name))(host)
    return adapter
