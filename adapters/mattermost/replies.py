"""How a reply goes out on Mattermost: Markdown parts under the post limit into the thread, a
streamed preview edited into part 1, files uploaded after the text, and a part left in doubt by
a crash looked up by its key before it is posted again."""

from __future__ import annotations

import time

import structlog

from adapters.mattermost.api import PROP_KEY, JsonDict, MattermostApi
from hermes_gateway.platforms import (
    AdapterError,
    MessageEvent,
    OutboundMessage,
    PreviewBook,
    PreviewRef,
    PreviewWire,
    Target,
    Upload,
    split_rendered,
)

log = structlog.get_logger("hermes.adapters.mattermost")
# with no part posted yet, a part in doubt is looked for among the posts of the last minutes:
# the server's clock may differ from ours by this much
CLOCK_SKEW_MS = 5 * 60 * 1000
_MARKDOWN = Target(str, str, str)


def split_parts(markdown: str, limit: int) -> list[str]:
    """Mattermost renders Markdown itself: the parts are the text, split under ``limit``
    (counted in UTF-16 units, never fewer than the characters the server counts)."""
    return split_rendered(markdown, limit, _MARKDOWN)


class PostReply:
    """One reply's primitives in its channel and thread (a `ReplyWire`); the reference a part
    comes after is the server time (epoch ms) of the newest post of this reply.

    Exactly once: each part is posted with its idempotency key as ``pending_post_id`` (a server
    answers a repeat within its dedupe window, about 30 s, with the first post) and in the
    post's ``props``, which the server keeps: after a crash the channel's posts since the
    reference recorded with the part's intent are searched for the key."""

    def __init__(self, api: MattermostApi, channel: str, root: str, bot: str) -> None:
        self.api = api
        self.channel = channel
        self.root = root
        self.bot = bot  # the bot's user id: only its own posts count as sent
        self.last = ""

    def after(self) -> str:
        return self.last or str(int(time.time() * 1000) - CLOCK_SKEW_MS)

    async def post(self, index: int, part: str, key: str | None) -> None:
        posted = await self.api.create_post(self.channel, part, self.root, key=key)
        self._saw(posted)

    async def edit(self, ref: str, part: str) -> None:
        await self.api.patch_post(ref, part)

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        if key is None:  # posted without a key: nothing to find it by
            return False
        found = await find_posted(self.api, self.channel, after, key, self.bot)
        if found is not None:
            self._saw(found)
        return found is not None

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        """The file uploaded, then posted with its caption (the key in the post, as a text
        part's)."""
        file = upload.file
        file_id = await self.api.upload(self.channel, file.name, upload.data)
        posted = await self.api.create_post(
            self.channel, file.caption, self.root, key=key, file_ids=(file_id,)
        )
        self._saw(posted)

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        """Found like a text part: the post carrying the key (an upload whose post never went
        out is left unused on the server and uploaded again)."""
        return await self.sent(upload.file.caption, key, after)

    def _saw(self, post: JsonDict) -> None:
        at = post.get("create_at")
        if isinstance(at, int) and not isinstance(at, bool):
            self.last = str(at)


async def find_posted(
    api: MattermostApi, channel: str, after: str, key: str, bot: str
) -> JsonDict | None:
    """The bot's post carrying ``key`` among the channel's posts since ``after`` (epoch ms),
    or None when there is none or the posts cannot be read (the part is then sent again)."""
    since = int(after) if after.isdigit() else int(time.time() * 1000) - CLOCK_SKEW_MS
    try:
        # the server answers posts changed strictly after ``since``: a part posted in the same
        # millisecond as the reference is still found
        posts = await api.posts_since(channel, since - 1)
    except AdapterError as exc:
        log.warning("mattermost.posts_unreadable", channel=channel, error=str(exc))
        return None
    for post in posts:
        props = post.get("props")
        if post.get("user_id") == bot and isinstance(props, dict) and props.get(PROP_KEY) == key:
            log.info("mattermost.part_found", channel=channel, post_id=post.get("id"))
            return post
    return None


def preview_wire(
    api: MattermostApi, event: MessageEvent, limit: int, interval: float
) -> PreviewWire[str]:
    """The live preview: posted into the event's thread, edited in place (PUT .../patch)."""
    root = event.thread_id or ""

    async def post(text: str) -> str:
        return str((await api.create_post(event.chat_id, text, root, attempts=1)).get("id") or "")

    async def edit(post_id: str, text: str) -> None:
        await api.patch_post(post_id, text, attempts=1)

    def first_part(markdown: str) -> str:
        parts = split_parts(markdown, limit) if markdown.strip() else []
        return parts[0] if parts else ""

    return PreviewWire("mattermost", post, edit, first_part, interval)


async def take_preview(
    previews: PreviewBook[str, str], message: OutboundMessage
) -> PreviewRef[str, str] | None:
    """The preview of the first answered message that has one."""
    for answered in message.answers:
        if (ref := await previews.take(answered)) is not None:
            return PreviewRef(message.answers[0], ref) if ref else None
    return None
