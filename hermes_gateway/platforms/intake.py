"""The way in for every platform: a normalized message (`Inbound`) handed to `AdapterHost.submit`
through `Intake`, which reads the per-user setting, submits, and says what the platform may do
with the message afterwards (`Taken.keep`: leave it unconfirmed so it is offered again)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from hermes_gateway.events import MessageEvent, Sender
from hermes_gateway.platforms.adapter import AdapterHost, Admitted, SubmitOutcome

log = structlog.get_logger("hermes.intake")


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is on its platform, learned when it connects: its own messages come back
    as ``"self"``, and users address it by name or id."""

    user_id: str  # the bot's user id (Telegram's getMe, Slack's auth.test user_id)
    username: str = ""  # the name users @mention and append to commands (Telegram)
    bot_id: str = ""  # the app's bot id, which the bot's own posts carry (Slack)

    def is_me(self, user_id: object) -> bool:
        """``user_id`` (as the platform gives it: int or str) is the bot's own."""
        return bool(self.user_id) and str(user_id) == self.user_id


@dataclass(frozen=True, slots=True)
class Inbound:
    """A normalized message and who wrote it, which admission needs (the bot itself and other
    bots are refused in the core, not by the adapter)."""

    event: MessageEvent
    from_self: bool = False
    from_bot: bool = False

    @property
    def sender(self) -> Sender:
        return "self" if self.from_self else "bot" if self.from_bot else "user"


T = TypeVar("T")
# what an SDK object built from a payload shape its platform never sends raises when read
MALFORMED = (AttributeError, TypeError, ValueError, LookupError)


def tolerant(normalize: Callable[[], T], logger: Any, event: str, **ids: object) -> T | None:
    """``normalize()``, or None when the SDK object it reads is malformed (an SDK does not check
    the payload's field types or presence): logged as ``event`` with ``ids``, never raised, so
    one odd payload cannot stop intake (fuzzing)."""
    try:
        return normalize()
    except MALFORMED as exc:
        logger.warning(event, error=repr(exc)[:200], **ids)
        return None


# per_user (`runner.group_sessions_per_user`, read at each message) -> the message, or None
Read = Callable[[bool], Inbound | None]
# the adapter's own last look before submit: the event to submit, or None to let it go
Screen = Callable[[MessageEvent], Awaitable[MessageEvent | None]]


@dataclass(frozen=True, slots=True)
class Taken:
    """What became of one platform message: the event submitted (None when it was ignored or
    screened out) and the core's answer (None likewise)."""

    event: MessageEvent | None = None
    outcome: SubmitOutcome | None = None

    @property
    def keep(self) -> bool:
        """The core did not take it, because the store could not write or the gateway is
        shutting down: the platform must keep it (no offset moved, no ack, no 200) so it is
        offered again (to another instance, or at the next start); anything else may be
        confirmed to the platform."""
        return self.outcome in ("unavailable", "closed")


class Intake:
    """One platform's intake, the same steps for every adapter: normalize with the session
    setting in force, let the adapter screen the event, submit it with its sender."""

    def __init__(self, host: AdapterHost, platform: str) -> None:
        self.host = host
        self.platform = platform

    async def take(
        self,
        read: Read,
        *,
        durable: bool = False,
        screen: Screen | None = None,
        admitted: Admitted | None = None,
    ) -> Taken:
        """Normalize (``read``), screen, submit. ``durable``: the platform redelivers what it
        was not told is taken, so the core answers "unavailable" rather than take it unstored
        (see `AdapterHost.submit`); ``admitted`` runs once admission lets the message in."""
        inbound = read(self.host.config.runner.group_sessions_per_user)
        if inbound is None:
            return Taken()
        event = inbound.event if screen is None else await screen(inbound.event)
        if event is None:
            return Taken()
        outcome = await self.host.submit(
            event, durable=durable, sender=inbound.sender, admitted=admitted
        )
        log.debug(f"{self.platform}.submitted", outcome=outcome, message_id=event.message_id)
        return Taken(event, outcome)
