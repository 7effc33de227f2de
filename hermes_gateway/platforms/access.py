"""Who may talk to the agent on a platform, checked by the core on every message's intake.

Default deny. The bot's own messages (and other bots', unless allowed) are always ignored;
in groups the bot answers only when addressed (`require_mention`); unknown users get silence
(logged) or, with `pairing`, a code an operator can approve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import structlog

from hermes_gateway.errors import AdapterError, StoreError
from hermes_gateway.events import MessageEvent, OutboundMessage, Sender
from hermes_gateway.platform_spec import PlatformSection
from hermes_gateway.platforms.pairing import PairingBook

if TYPE_CHECKING:
    from hermes_gateway.config.live import LiveConfig
    from hermes_gateway.platforms.adapter import Adapter

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

    def __init__(self, platform: str, config: PlatformSection, pairing: PairingBook | None) -> None:
        self.platform = platform
        self._book = pairing
        self.reconfigure(config)

    def reconfigure(self, config: PlatformSection) -> None:
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


class Gatekeeper:
    """Admission on the one path every message takes (`Reception.submit`), so an adapter cannot
    let a stranger in by forgetting a check. A platform whose section has no access rules (the
    local API: its routes want `control.token` when one is set) is not checked here; a
    platform without any section gets the defaults, which deny everyone."""

    def __init__(
        self, live: LiveConfig, pairing: PairingBook, adapters: Mapping[str, Adapter]
    ) -> None:
        self._live = live
        self._book = pairing
        self._adapters = adapters
        self._policies: dict[str, AccessPolicy] = {}

    def _section(self, platform: str) -> PlatformSection | None:
        platforms = self._live.now.platforms
        if platform not in type(platforms).model_fields:  # a name, not any attribute
            return PlatformSection()
        section = getattr(platforms, platform)
        return section if isinstance(section, PlatformSection) else None

    def policy(self, platform: str) -> AccessPolicy | None:
        policy = self._policies.get(platform)
        if policy is None:
            section = self._section(platform)
            if section is None:
                return None
            policy = self._policies[platform] = AccessPolicy(platform, section, self._book)
        return policy

    def reconfigure(self) -> None:
        """SIGHUP: every policy takes its section's new rules."""
        for name, policy in self._policies.items():
            section = self._section(name)
            if section is not None:
                policy.reconfigure(section)

    async def admit(self, event: MessageEvent, sender: Sender) -> bool:
        """Whether ``event`` may go on; when not, its sender gets the reply the rules give
        (a pairing code, a "try later"), sent by its adapter as a notice."""
        policy = self.policy(event.platform)
        if policy is None:
            return True
        admission = await policy.admit(
            event,
            from_self=sender == "self",
            from_bot=sender == "bot",
            allow_bots=bool(getattr(policy.config, "allow_bots", False)),
        )
        if admission.reply:
            await self._tell(event, admission.reply)
        if not admission.allowed:
            log.debug(
                "access.refused",
                platform=event.platform,
                verdict=admission.verdict,
                user_id=event.user_id,
            )
        return admission.allowed

    async def _tell(self, event: MessageEvent, text: str) -> None:
        adapter = self._adapters.get(event.platform)
        if adapter is None:
            return
        try:  # a reply that cannot go out changes nothing: the message stays refused
            await adapter.send(OutboundMessage.to(event, text, "notice"))
        except AdapterError as exc:
            log.warning("access.reply_failed", platform=event.platform, error=str(exc))
        except Exception:
            log.exception("access.reply_failed", platform=event.platform)
