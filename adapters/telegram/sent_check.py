"""Exactly once on Telegram, which has no idempotency key: before sending again a part whose
send a crash cut short, find out whether it went out, by probing the message ids after the
newest one known before that send with an edit to the same text (a file's: to the same
caption). Telegram answers "message is not modified" only for a message that exists with
exactly that text; a missing id answers "message to edit not found"; a message of someone else
"can't be edited"."""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Literal

import structlog

from adapters.telegram.render import telegram_html_to_plain
from telegram.constants import ParseMode
from telegram.error import BadRequest, TelegramError

if TYPE_CHECKING:
    from adapters.telegram.sending import Sender

log = structlog.get_logger("hermes.adapters.telegram")
Probe = Literal["same", "missing", "other", "unknown"]
PARSE_ERROR = "can't parse entities"  # PTB capitalizes Telegram's text: compare lower-cased
NOT_MODIFIED = "message is not modified"
_MISSING = "message to edit not found"
_CHATS = 1024  # chats whose recent own message ids are kept
_PER_CHAT = 64


class SeenIds:
    """The message ids this process saw in each chat (the bot's own, the users' it answers):
    the reference a part comes after, and own messages a probe must never overwrite."""

    def __init__(self) -> None:
        self._ids: OrderedDict[str, deque[int]] = OrderedDict()

    def note(self, chat_id: str, message_id: int) -> None:
        ids = self._ids.get(chat_id)
        if ids is None:
            ids = self._ids[chat_id] = deque(maxlen=_PER_CHAT)
            if len(self._ids) > _CHATS:
                self._ids.popitem(last=False)
        self._ids.move_to_end(chat_id)
        ids.append(message_id)

    def newest(self, chat_id: str, *others: str | None) -> str:
        """The newest message id known in the chat (with ``others``, e.g. the message answered)."""
        known = [*self._ids.get(chat_id, ()), *(int(o) for o in others if o and o.isdigit())]
        return str(max(known)) if known else ""

    def own(self, chat_id: str) -> set[int]:
        return set(self._ids.get(chat_id, ()))


async def find_sent(
    sender: Sender,
    known: SeenIds,
    chat_id: str,
    html: str,
    after: str,
    limit: int,
    caption: bool = False,
) -> int | None:
    """The id of the bot's message after ``after`` that shows exactly ``html``, or None.

    Probes at most ``limit`` ids in order, skipping ids this process knows (its own messages
    must not be overwritten by a probe), and stops at the first id Telegram does not know (ids
    are given in order in a chat: the rest are newer still). None when unsure: the part is then
    sent again, since a doubled part is better than a lost one. ``caption``: ``html`` is the
    plain caption of a file part, probed with editMessageCaption.
    """
    if not after.isdigit():
        return None
    skip = known.own(chat_id)
    candidate, tried = int(after), 0
    while tried < limit:
        candidate += 1
        if candidate in skip:
            continue
        tried += 1
        if caption:
            answer = await _probe_caption(sender, chat_id, candidate, html)
        else:
            answer = await _probe(sender, chat_id, candidate, html)
        if answer == "same":
            log.info("telegram.part_found", chat_id=chat_id, message_id=candidate, probes=tried)
            return candidate
        if answer in ("missing", "unknown"):
            break
    log.info("telegram.part_not_found", chat_id=chat_id, after=after, probes=tried)
    return None


async def _probe(sender: Sender, chat_id: str, message_id: int, html: str) -> Probe:
    """Edit ``message_id`` to ``html`` (as HTML, or as the plain text the send fell back to)."""
    for text, mode in ((html, ParseMode.HTML), (telegram_html_to_plain(html), None)):
        try:
            await sender.edit_once(chat_id, message_id, text, mode)
        except BadRequest as exc:
            why = str(exc).lower()
            if NOT_MODIFIED in why:
                return "same"
            if _MISSING in why:
                return "missing"
            if PARSE_ERROR in why and mode is not None:
                continue  # the part went out as plain text: probe that
            return "other"  # another user's message, a photo, a service message
        except TelegramError as exc:
            log.warning("telegram.probe_failed", chat_id=chat_id, error=str(exc))
            return "unknown"
        # it changed: a message of this bot this process did not know (another instance's)
        log.error("telegram.probe_overwrote", chat_id=chat_id, message_id=message_id)
        return "other"
    return "other"


async def _probe_caption(sender: Sender, chat_id: str, message_id: int, caption: str) -> Probe:
    """Edit the caption of ``message_id`` to ``caption``: a text message "has no caption"."""
    try:
        await sender.caption_once(chat_id, message_id, caption)
    except BadRequest as exc:
        why = str(exc).lower()
        if NOT_MODIFIED in why:
            return "same"
        return "missing" if _MISSING in why else "other"
    except TelegramError as exc:
        log.warning("telegram.probe_failed", chat_id=chat_id, error=str(exc))
        return "unknown"
    log.error("telegram.probe_overwrote", chat_id=chat_id, message_id=message_id)
    return "other"
