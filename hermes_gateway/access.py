"""Who may talk to the agent on a platform: shared by every adapter.

Default deny. The bot's own messages (and other bots', unless allowed) are always ignored;
in groups the bot answers only when addressed (`require_mention`); unknown users get silence
(logged) or, with `pairing`, a code an operator can approve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import structlog

from hermes_gateway.config_schema import _PlatformBase
from hermes_gateway.errors import StoreError
from hermes_gateway.events import MessageEvent
from hermes_gateway.pairing import PairingBook

log = structlog.get_logger("hermes.access")

Verdict = Literal["allow", "self", "bot", "not_addressed", "unauthorized", "pairing"]

PAIRING_REPLY = (
    "Hi! I don't know you yet. Ask the operator of this bot to run:\n\n"
    "hermes pairing approve {platform} {code}\n\n"
    "The code is valid for one hour."
)
PAIRING_FULL = "Hi! Too many people are waiting for approval right now; please try again later."
PAIRING_DOWN = (
    "Hi! I can't take pairing requests right now (my database is unavailable); please try "
    "again in a few minutes."
)


@dataclass(frozen=True, slots=True)
class Admission:
    verdict: Verdict
    reply: str | None = None  # what to tell the sender, if anything

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"


class AccessPolicy:
    """One platform's access rules."""

    def __init__(self, platform: str, config: _PlatformBase, pairing: PairingBook | None) -> None:
        self.platform = platform
        self._book = pairing
        self.reconfigure(config)

    def reconfigure(self, config: _PlatformBase) -> None:
        """Take new rules (SIGHUP) without dropping anything in flight."""
        self.config = config
        self.pairing = self._book if config.pairing else None
        self._allowed = frozenset(config.allowed_users)

    def is_allowed_user(self, user_id: str) -> bool:
        if self.config.allow_all or user_id in self._allowed:
            return True
        return self.pairing is not None and self.pairing.is_approved(self.platform, user_id)

    async def admit(
        self,
        event: MessageEvent,
        *,
        from_self: bool = False,
        from_bot: bool = False,
        allow_bots: bool = False,
    ) -> Admission:
        if from_self:
            return Admission("self")
        if from_bot and not allow_bots:
            return Admission("bot")
        if event.chat_type != "dm" and self.config.require_mention and not event.mentioned:
            return Admission("not_addressed")
        if self.is_allowed_user(event.user_id):
            return Admission("allow")
        if self.pairing is not None and event.chat_type == "dm":
            try:
                request = await self.pairing.request(
                    self.platform, event.user_id, event.user_name, event.chat_id
                )
            except StoreError as exc:  # a code not stored could never be approved
                log.error("pairing.request_failed", error=str(exc), user_id=event.user_id)
                return Admission("pairing", PAIRING_DOWN)
            if request is None:
                return Admission("pairing", PAIRING_FULL)
            return Admission(
                "pairing", PAIRING_REPLY.format(platform=self.platform, code=request.code)
            )
        log.info(
            "access.denied",
            platform=self.platform,
            user_id=event.user_id,
            user_name=event.user_name,
            chat_type=event.chat_type,
        )
        return Admission("unauthorized")
