"""Slash-command interactions that outlive the process: what answering one needs (application id,
token, creation time) kept as the event's `reply_context`, and its followup webhook rebuilt from
that after a restart, while the token lives."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import discord

INTERACTION_TTL_S = 14 * 60.0  # tokens live 15 minutes from creation: a minute's margin
_KEY = "discord_interaction"


@dataclass(frozen=True, slots=True)
class StoredInteraction:
    """An acknowledged ("thinking...") interaction; `token` is a credential, never logged."""

    application_id: int
    token: str = field(repr=False)
    created: float  # epoch seconds

    def remaining(self) -> float:
        """Seconds the token can still be used (<= 0: answer in the channel instead)."""
        return self.created + INTERACTION_TTL_S - time.time()

    def webhook(self, client: discord.Client) -> discord.Webhook:
        """The interaction's followup webhook, on the client's session and state (so its
        allowed mentions apply), without the `Interaction` the previous process had."""
        return discord.Webhook.partial(self.application_id, self.token, client=client)

    def encode(self) -> str:
        fields = {"application_id": str(self.application_id), "token": self.token}
        return json.dumps({_KEY: {**fields, "created": self.created}})

    @classmethod
    def decode(cls, context: str) -> StoredInteraction | None:
        """The interaction in an event's `reply_context`; None for anything else (a plain
        message, a row from before this field, a context this version cannot read)."""
        if not context:
            return None
        try:
            data: Any = json.loads(context)[_KEY]
            return cls(int(data["application_id"]), str(data["token"]), float(data["created"]))
        except (ValueError, TypeError, KeyError):
            return None


def reply_context(interaction: discord.Interaction[Any]) -> str:
    """What to keep with the accepted command so that a replay can still answer it."""
    # Discord's clock (the snowflake) or ours, whichever is earlier: never overestimate the life
    created = min(interaction.created_at.timestamp(), time.time())
    stored = StoredInteraction(interaction.application_id, interaction.token, created)
    return stored.encode()
