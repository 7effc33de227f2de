"""Payload factories for the fake Discord, shaped after discord.py's `discord/types/*.py`.

discord.py's gateway parsers index required keys directly (a missing one kills `client.start()`),
so every factory emits all required keys. Snowflakes go out as strings, like Discord sends them.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

DISCORD_EPOCH_MS = 1420070400000
MESSAGE_CONTENT_INTENT = 1 << 15
EPHEMERAL_FLAG = 1 << 6
LOADING_FLAG = 1 << 7
# Application flag set when the message-content toggle is on for an unverified app.
APP_FLAG_GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19
ATTACHMENT_SIZE_LIMIT = 10 * 1024 * 1024

# A typical @everyone: view, send, embed, attach, history, react, external emoji,
# slash commands, public threads, send in threads.
EVERYONE_PERMISSIONS = (
    ((1 << 6) | (1 << 10) | (1 << 11) | (1 << 14) | (1 << 15) | (1 << 16) | (1 << 18) | (1 << 31))
    | (1 << 35)
    | (1 << 38)
)


class _Snowflakes:
    """Strictly increasing snowflakes whose timestamp part is 'now' (so created_at is sane)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> int:
        with self._lock:
            candidate = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
            self._last = max(candidate, self._last + 1)
            return self._last


_snowflakes = _Snowflakes()


def snowflake() -> int:
    """A fresh snowflake id, unique within the process."""
    return _snowflakes.next()


def iso_now() -> str:
    return datetime.now(UTC).isoformat()


def make_user(user_id: int, username: str = "alice", *, bot: bool = False, **extra: Any) -> dict:
    """A `User`; pass extra keys (verified, mfa_enabled, ...) for the `/users/@me` shape."""
    return {
        "id": str(user_id),
        "username": username,
        "discriminator": "0",
        "global_name": None if bot else username,
        "avatar": None,
        "bot": bot,
        "system": False,
        "public_flags": 0,
        "flags": 0,
        **extra,
    }


def make_role(
    role_id: int,
    name: str = "@everyone",
    *,
    permissions: int = EVERYONE_PERMISSIONS,
    position: int = 0,
) -> dict:
    return {
        "id": str(role_id),
        "name": name,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "position": position,
        "permissions": str(permissions),
        "managed": False,
        "mentionable": False,
        "flags": 0,
        "icon": None,
        "unicode_emoji": None,
    }


def make_member(
    user: dict | None = None,
    *,
    roles: list[int] | None = None,
    nick: str | None = None,
    permissions: int | None = None,
) -> dict:
    """A guild `Member`; without `user` it is the partial member that rides along a message."""
    member: dict[str, Any] = {
        "roles": [str(r) for r in roles or []],
        "joined_at": iso_now(),
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
        "premium_since": None,
        "nick": nick,
        "avatar": None,
        "communication_disabled_until": None,
    }
    if user is not None:
        member["user"] = user
    if permissions is not None:
        member["permissions"] = str(permissions)
    return member


def make_channel(
    channel_id: int, guild_id: int, name: str = "general", *, type: int = 0, position: int = 0
) -> dict:
    """A guild text channel (type 0); other guild channel types take the same base keys."""
    return {
        "id": str(channel_id),
        "type": type,
        "guild_id": str(guild_id),
        "name": name,
        "position": position,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
        "topic": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "default_auto_archive_duration": 1440,
        "flags": 0,
    }


def make_dm_channel(channel_id: int, recipient: dict) -> dict:
    return {
        "id": str(channel_id),
        "type": 1,
        "name": "",
        "last_message_id": None,
        "recipients": [recipient],
        "flags": 0,
    }


def make_thread(
    thread_id: int,
    guild_id: int,
    parent_id: int,
    owner_id: int,
    name: str = "t",
    *,
    type: int = 11,
    newly_created: bool = False,
) -> dict:
    """A `Thread` (11 = public thread); `newly_created` makes discord.py fire on_thread_create."""
    now = iso_now()
    thread: dict[str, Any] = {
        "id": str(thread_id),
        "guild_id": str(guild_id),
        "parent_id": str(parent_id),
        "owner_id": str(owner_id),
        "name": name,
        "type": type,
        "nsfw": False,
        "member_count": 1,
        "message_count": 0,
        "total_message_sent": 0,
        "rate_limit_per_user": 0,
        "last_message_id": None,
        "flags": 0,
        "applied_tags": [],
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": now,
            "locked": False,
            "create_timestamp": now,
        },
    }
    if newly_created:
        thread["newly_created"] = True
    return thread


def make_guild(
    guild_id: int,
    *,
    name: str = "Hermes Test Guild",
    owner_id: int,
    channels: list[dict],
    roles: list[dict],
    members: list[dict],
    threads: list[dict] | None = None,
) -> dict:
    """A full `Guild` as GUILD_CREATE sends it (member_count == len(members): no chunking)."""
    nulls = (
        "icon", "splash", "discovery_splash", "banner", "description", "incidents_data",
        "afk_channel_id", "application_id", "system_channel_id", "rules_channel_id",
        "public_updates_channel_id", "vanity_url_code", "max_presences",
    )  # fmt: skip
    empties = (
        "emojis", "stickers", "features", "stage_instances", "guild_scheduled_events",
        "soundboard_sounds", "voice_states", "presences",
    )  # fmt: skip
    zeros = (
        "verification_level", "default_message_notifications", "explicit_content_filter",
        "mfa_level", "nsfw_level", "system_channel_flags", "premium_tier",
        "premium_subscription_count",
    )  # fmt: skip
    return {
        **dict.fromkeys(nulls),
        **{key: [] for key in empties},
        **dict.fromkeys(zeros, 0),
        "id": str(guild_id),
        "name": name,
        "owner_id": str(owner_id),
        "region": "us-east",
        "afk_timeout": 300,
        "nsfw": False,
        "premium_progress_bar_enabled": False,
        "preferred_locale": "en-US",
        "max_members": 500000,
        "max_video_channel_users": 25,
        "widget_enabled": False,
        "joined_at": iso_now(),
        "large": False,
        "unavailable": False,
        "member_count": len(members),
        "roles": roles,
        "members": members,
        "channels": channels,
        "threads": threads or [],
    }


def make_attachment(
    filename: str,
    *,
    url: str,
    attachment_id: int | None = None,
    size: int = 0,
    content_type: str | None = None,
) -> dict:
    attachment: dict[str, Any] = {
        "id": str(attachment_id or snowflake()),
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
        "flags": 0,
    }
    if content_type:
        attachment["content_type"] = content_type
    return attachment


def make_message(
    message_id: int,
    channel_id: int,
    author: dict,
    content: str = "",
    *,
    guild_id: int | None = None,
    member: dict | None = None,
    mentions: list[dict] | None = None,
    attachments: list[dict] | None = None,
    message_reference: dict | None = None,
    referenced_message: dict | None = None,
    **extra: Any,
) -> dict:
    """A `Message` (MESSAGE_CREATE / REST shape). A reply gets type 19 and `referenced_message`."""
    message: dict[str, Any] = {
        "id": str(message_id),
        "channel_id": str(channel_id),
        "author": author,
        "content": content,
        "timestamp": iso_now(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": mentions or [],
        "mention_roles": [],
        "attachments": attachments or [],
        "embeds": [],
        "components": [],
        "pinned": False,
        "type": 19 if message_reference else 0,
        "flags": 0,
    }
    if guild_id is not None:
        message["guild_id"] = str(guild_id)
    if member is not None:
        message["member"] = member
    if message_reference is not None:
        message["message_reference"] = message_reference
        message["referenced_message"] = referenced_message
    message.update(extra)
    return message


def make_ready(
    user: dict,
    guild_ids: list[int],
    session_id: str,
    resume_gateway_url: str,
    app: dict,
    shard: tuple[int, int] = (0, 1),
) -> dict:
    """READY: guilds start unavailable and become available with their GUILD_CREATE."""
    return {
        "v": 10,
        "user": user,
        "guilds": [{"id": str(g), "unavailable": True} for g in guild_ids],
        "session_id": session_id,
        "resume_gateway_url": resume_gateway_url,
        "shard": list(shard),
        "application": {"id": app["id"], "flags": app["flags"]},
        "private_channels": [],
        "presences": [],
        "_trace": ["fake-discord"],
    }


def make_application(app_id: int, name: str, owner: dict, *, flags: int = 0) -> dict:
    """`AppInfo` for GET /oauth2/applications/@me (interactions_endpoint_url must stay None)."""
    return {
        "id": str(app_id),
        "name": name,
        "icon": None,
        "description": "",
        "summary": "",
        "verify_key": "0" * 64,
        "flags": flags,
        "owner": owner,
        "bot_public": True,
        "bot_require_code_grant": False,
        "interactions_endpoint_url": None,
        "rpc_origins": [],
        "redirect_uris": [],
        "tags": [],
    }


def make_app_command(
    command_id: int, application_id: int, body: dict, guild_id: int | None = None
) -> dict:
    """A registered `ApplicationCommand`: the client's body plus the server-assigned fields."""
    command = {
        "type": 1,
        "description": "",
        "options": [],
        "default_member_permissions": None,
        "dm_permission": True,
        "nsfw": False,
        "contexts": None,
        "integration_types": None,
        **body,
        "id": str(command_id),
        "application_id": str(application_id),
        "version": str(snowflake()),
    }
    if guild_id is not None:
        command["guild_id"] = str(guild_id)
    return command


_OPTION_TYPES: list[tuple[type, int]] = [(bool, 5), (int, 4), (float, 10), (str, 3)]


def make_command_options(options: dict[str, Any] | list[dict] | None) -> list[dict]:
    """Slash-command option values; a dict infers types (str 3, int 4, bool 5, float 10)."""
    if options is None:
        return []
    if isinstance(options, list):
        return options
    result = []
    for name, value in options.items():
        # bool before int: bool is a subclass of int.
        kind = next(code for cls, code in _OPTION_TYPES if isinstance(value, cls))
        result.append({"name": name, "type": kind, "value": value})
    return result


def make_interaction(
    interaction_id: int,
    application_id: int,
    token: str,
    *,
    command_id: int,
    command_name: str,
    channel: dict,
    guild_id: int | None = None,
    member: dict | None = None,
    user: dict | None = None,
    options: list[dict] | None = None,
) -> dict:
    """An application-command INTERACTION_CREATE: pass `member` in a guild, `user` in a DM."""
    data: dict[str, Any] = {"id": str(command_id), "name": command_name, "type": 1}
    data["options"] = options or []
    interaction: dict[str, Any] = {
        "id": str(interaction_id),
        "application_id": str(application_id),
        "type": 2,
        "data": data,
        "token": token,
        "version": 1,
        "channel_id": channel["id"],
        "channel": {**channel, "permissions": str(EVERYONE_PERMISSIONS)},
        "app_permissions": str(EVERYONE_PERMISSIONS),
        "locale": "en-US",
        "entitlements": [],
        "entitlement_sku_ids": [],
        "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,
    }
    if guild_id is not None:
        data["guild_id"] = str(guild_id)
        interaction["guild_id"] = str(guild_id)
        interaction["guild"] = {"id": str(guild_id), "locale": "en-US", "features": []}
        interaction["guild_locale"] = "en-US"
        interaction["member"] = member
        interaction["authorizing_integration_owners"] = {"0": str(guild_id)}
        interaction["context"] = 0
    else:
        interaction["user"] = user
        interaction["authorizing_integration_owners"] = {"1": str(user["id"]) if user else "0"}
        interaction["context"] = 1
    return interaction


def make_interaction_callback(
    interaction_id: int, callback_type: int, message: dict | None = None
) -> dict:
    """The `?with_response=1` body of an interaction callback (discord.py 2.7 requires it)."""
    flags = int(message["flags"]) if message else 0
    response: dict[str, Any] = {
        "id": str(interaction_id),
        "type": 2,
        "response_message_loading": bool(flags & LOADING_FLAG),
        "response_message_ephemeral": bool(flags & EPHEMERAL_FLAG),
    }
    resource: dict[str, Any] = {"type": callback_type}
    if message is not None:
        response["response_message_id"] = message["id"]
        resource["message"] = message
    return {"interaction": response, "resource": resource}


def make_error(code: int, message: str, errors: dict | None = None) -> dict:
    """Discord's JSON error body; discord.py flattens `errors` into the exception text."""
    body: dict[str, Any] = {"code": code, "message": message}
    if errors is not None:
        body["errors"] = errors
    return body


def content_too_long_error(*path: str, limit: int = 2000) -> dict:
    """The 400 body for content over the limit; `path` locates the field (default "content")."""
    detail = {"code": "BASE_TYPE_MAX_LENGTH", "message": f"Must be {limit} or fewer in length."}
    errors: dict[str, Any] = {"_errors": [detail]}
    for key in reversed(path or ("content",)):
        errors = {key: errors}
    return make_error(50035, "Invalid Form Body", errors)
