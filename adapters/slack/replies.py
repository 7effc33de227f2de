"""How a reply goes out on Slack: mrkdwn parts under the message limit into the thread, a
streamed preview becoming part 1, and a part left in doubt by a crash looked up before it is
posted again."""

from __future__ import annotations

from adapters.slack.api import SlackWeb
from adapters.slack.render import split_rendered_slack
from adapters.slack.sent_check import find_file, find_posted, metadata
from hermes_gateway.platforms import OutboundMessage, PreviewBook, PreviewRef, Replier, Upload


class ThreadReply:
    """One reply's primitives in its thread (a `ReplyWire`): every part carries its key in
    its metadata, and the ts of the newest part is what the next part's intent records."""

    def __init__(self, web: SlackWeb, message: OutboundMessage, bot: str = "") -> None:
        self.web = web
        self.message = message
        self.bot = bot  # the bot's user id: a file in doubt is looked up among its shares
        self.last = message.reply_to or ""  # the newest ts a part about to go out comes after

    def after(self) -> str:
        return self.last

    async def post(self, index: int, part: str, key: str | None) -> None:
        message = self.message
        ts = await self.web.post(message.chat_id, part, message.thread_id, metadata=metadata(key))
        self.last = ts or self.last

    async def edit(self, ref: str, part: str) -> None:
        await self.web.update(self.message.chat_id, ref, part)

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        if key is None:  # posted without a key: nothing to find it by
            return False
        message = self.message
        found = await find_posted(self.web, message.chat_id, message.thread_id, after, key)
        self.last = found or self.last
        return bool(found)

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        message, file = self.message, upload.file
        await self.web.upload(
            message.chat_id, message.thread_id, upload.data, file.name, file.caption
        )

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        """Found by its name among the bot's shared files after ``after`` (a file shared by
        files_upload_v2 carries no metadata)."""
        if not self.bot:
            return False
        message = self.message
        chat, thread = message.chat_id, message.thread_id
        found = await find_file(self.web, chat, thread, after, self.bot, upload.file.name)
        self.last = found or self.last
        return bool(found)


async def post_reply(
    web: SlackWeb,
    replier: Replier[str, str],
    message: OutboundMessage,
    limit: int,
    bot: str = "",
) -> None:
    """Each part retried on its own by the caller's retries (earlier parts are never sent
    twice); the first takes over the preview of the first answered message that has one."""
    preview = await take_preview(replier.previews, message)
    parts = split_rendered_slack(message.text, limit)
    await replier.send(message, parts, ThreadReply(web, message, bot), preview)


async def take_preview(
    previews: PreviewBook[str, str], message: OutboundMessage
) -> PreviewRef[str, str] | None:
    """The preview of the first answered message that has one (whatever the reply's kind)."""
    for answered in message.answers:
        if (ts := await previews.take(answered)) is not None:
            return PreviewRef(message.answers[0], ts) if ts else None
    return None
