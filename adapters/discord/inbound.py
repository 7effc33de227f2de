"""Discord messages and slash commands as `MessageEvent`s: where they were written (DM, guild
channel, thread), whether the bot was addressed, the text without the bot's mention, files."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import structlog

import discord
from hermes_gateway.platforms import (
    Attachment,
    ChatType,
    Inbound,
    MessageEvent,
    parse_command,
    tolerant,
)

log = structlog.get_logger("hermes.adapters.discord")
PLATFORM = "discord"
_USER_MENTION = re.compile(r"<@!?(\d+)>")
_USER_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})

Where = tuple[ChatType, str, str | None]  # chat_type, chat_id, thread_id


def message_event(message: discord.Message, bot_id: int, per_user: bool) -> Inbound | None:
    """The event for a user's message, or None for what is not a conversation message (system
    messages such as pins and joins, group DMs).

    Never raises: discord.py builds a `Message` from a payload missing fields Discord always
    sends (``mentions``...) without those attributes; such a message is logged and ignored
    (fuzzing)."""
    read = partial(_message_event, message, bot_id, per_user)
    return tolerant(read, log, "discord.message_malformed", message_id=getattr(message, "id", None))


def _message_event(message: discord.Message, bot_id: int, per_user: bool) -> Inbound | None:
    if message.type not in _USER_TYPES:
        return None
    where = _where(message.channel, message.channel.id, message.guild is not None)
    if where is None:
        return None
    chat_type, chat_id, thread_id = where
    author = message.author
    attachments = tuple(_attachment(a) for a in message.attachments)
    text = _with_attachment_note(clean_text(message, bot_id), attachments)
    reference = message.reference
    event = MessageEvent.create(
        platform=PLATFORM,
        chat_type=chat_type,
        chat_id=chat_id,
        thread_id=thread_id,
        user_id=str(author.id),
        message_id=str(message.id),
        text=text,
        per_user=per_user,
        user_name=author.name,
        attachments=attachments,
        reply_to=str(reference.message_id) if reference and reference.message_id else None,
        mentioned=chat_type == "dm" or addresses_bot(message, bot_id),
    )
    from_bot = author.bot or message.webhook_id is not None
    return Inbound(event, from_self=author.id == bot_id, from_bot=from_bot)


def command_event(
    interaction: discord.Interaction[Any], name: str, args: str, per_user: bool
) -> Inbound | None:
    """A slash command as the same text a user would type (``/queue do this``)."""
    channel_id = interaction.channel_id
    if channel_id is None:
        return None
    where = _where(interaction.channel, channel_id, interaction.guild_id is not None)
    if where is None:
        return None
    chat_type, chat_id, thread_id = where
    event = MessageEvent.create(
        platform=PLATFORM,
        chat_type=chat_type,
        chat_id=chat_id,
        thread_id=thread_id,
        user_id=str(interaction.user.id),
        message_id=str(interaction.id),
        text=f"/{name} {args}".strip(),
        per_user=per_user,
        user_name=interaction.user.name,
        mentioned=True,
    )
    return Inbound(event)  # only a person can run a slash command


def _where(channel: Any, channel_id: int, in_guild: bool) -> Where | None:
    if isinstance(channel, discord.Thread):
        # a thread is its own session, shared by everyone in it: keyed by parent and thread
        return "thread", str(channel.parent_id), str(channel.id)
    if isinstance(channel, discord.GroupChannel):
        return None
    if not in_guild:
        return "dm", str(channel_id), None
    return "group", str(channel_id), None


def addresses_bot(message: discord.Message, bot_id: int) -> bool:
    """A mention (of the bot or its managed role), a reply to the bot, or a thread it owns."""
    if any(user.id == bot_id for user in message.mentions):
        return True
    if any(m == str(bot_id) for m in _USER_MENTION.findall(message.content)):
        return True
    if any(role.tags is not None and role.tags.bot_id == bot_id for role in message.role_mentions):
        return True
    reference = message.reference
    resolved = reference.resolved if reference is not None else None
    if isinstance(resolved, discord.Message) and resolved.author.id == bot_id:
        return True
    channel = message.channel
    return isinstance(channel, discord.Thread) and channel.owner_id == bot_id


def clean_text(message: discord.Message, bot_id: int) -> str:
    """The text without the bot's own mentions; other users' mentions as ``@name``."""
    names = {str(user.id): user.display_name for user in message.mentions}
    bot_roles = {
        role.mention for role in message.role_mentions if role.tags and role.tags.bot_id == bot_id
    }

    def user(match: re.Match[str]) -> str:
        if match[1] == str(bot_id):
            return ""
        name = names.get(match[1])
        return f"@{name}" if name else match[0]

    text = _USER_MENTION.sub(user, message.content)
    for mention in bot_roles:
        text = text.replace(mention, "")
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def looks_content_less(message: discord.Message) -> bool:
    """A guild message from a person with nothing in it: what the gateway delivers when the
    MESSAGE CONTENT intent is off (only DMs and mentions keep their text then)."""
    return (
        message.guild is not None
        and not message.author.bot
        and message.type in _USER_TYPES
        and not message.content
        and not message.attachments
        and not message.embeds
        and not message.stickers
        and message.poll is None
    )


def _attachment(att: discord.Attachment) -> Attachment:
    mime = att.content_type or ""
    kind = mime.split("/", 1)[0] if mime.startswith(("image/", "audio/", "video/")) else "document"
    if att.is_voice_message():
        kind = "voice"
    return Attachment(
        kind=kind,
        file_id=str(att.id),
        name=att.filename,
        mime_type=mime,
        size=att.size,
        url=att.url,
    )


def _with_attachment_note(text: str, attachments: tuple[Attachment, ...]) -> str:
    # the agent reads text only: tell it what came with the message (commands stay parseable)
    if not attachments or parse_command(text) is not None:
        return text
    notes = [
        f"[attached {a.kind}: {a.name} ({a.mime_type or 'unknown type'}, {a.size} bytes) {a.url}]"
        for a in attachments
    ]
    return "\n".join([text, *notes]).strip()
