"""Exactly once on Slack: every part carries its idempotency key in message metadata, and a
part whose send a crash cut short is looked up in the thread (or channel) history, metadata
included, before it is posted again. Reading history needs the `*:history` scopes; without
them the part is posted again (a doubled part rather than a lost one)."""

from __future__ import annotations

from typing import Any

import structlog

from adapters.slack.api import SlackWeb
from hermes_gateway.platforms import AdapterError

log = structlog.get_logger("hermes.adapters.slack")
EVENT_TYPE = "hermes_reply_part"
HISTORY_LIMIT = 200  # messages read after the reference: a busy channel's minutes


def metadata(key: str | None) -> dict[str, Any] | None:
    """The metadata a part is posted with (Slack keeps it with the message)."""
    if key is None:
        return None
    return {"event_type": EVENT_TYPE, "event_payload": {"key": key}}


async def find_posted(
    web: SlackWeb, channel: str, thread_ts: str | None, after: str, key: str
) -> str | None:
    """The ts of a message after ``after`` (a ts; "" for any) carrying ``key``, or None when
    there is none or the history cannot be read."""
    for message in await _after(web, channel, thread_ts, after):
        meta = message.get("metadata") or {}
        payload = meta.get("event_payload") or {}
        if meta.get("event_type") == EVENT_TYPE and payload.get("key") == key:
            log.info("slack.part_found", channel=channel, ts=message.get("ts"))
            return str(message.get("ts") or "")
    return None


async def find_file(
    web: SlackWeb, channel: str, thread_ts: str | None, after: str, bot: str, name: str
) -> str | None:
    """The ts of a message of the bot (user id ``bot``) after ``after`` that shares a file
    named ``name`` (a shared file carries no metadata: its name and author are the check)."""
    for message in await _after(web, channel, thread_ts, after):
        names = [f.get("name") for f in message.get("files") or []]
        if message.get("user") == bot and name in names:
            log.info("slack.file_found", channel=channel, ts=message.get("ts"))
            return str(message.get("ts") or "")
    return None


async def _after(
    web: SlackWeb, channel: str, thread_ts: str | None, after: str
) -> list[dict[str, Any]]:
    """The messages after ``after`` in the thread (or channel), metadata included; none when
    the history cannot be read."""
    oldest = after or None
    try:
        if thread_ts:
            response = await web.call(
                "conversations.replies",
                lambda: web.client.conversations_replies(
                    channel=channel,
                    ts=thread_ts,
                    oldest=oldest,
                    include_all_metadata=True,
                    limit=HISTORY_LIMIT,
                ),
                attempts=2,
            )
        else:
            response = await web.call(
                "conversations.history",
                lambda: web.client.conversations_history(
                    channel=channel, oldest=oldest, include_all_metadata=True, limit=HISTORY_LIMIT
                ),
                attempts=2,
            )
    except AdapterError as exc:
        log.warning("slack.history_unreadable", channel=channel, error=str(exc))
        return []
    return list(response.get("messages") or [])
