"""How a reply goes out on Slack: mrkdwn parts under the message limit into the thread, a
streamed preview becoming part 1, and a part left in doubt by a crash looked up before it is
posted again."""

from __future__ import annotations

from functools import partial

from adapters.slack.api import SlackWeb
from adapters.slack.render import split_rendered_slack
from adapters.slack.sent_check import find_posted, metadata
from hermes_gateway.platforms import OutboundMessage, PreviewBook, part_key, send_parts


async def post_reply(
    web: SlackWeb, previews: PreviewBook[str, str], message: OutboundMessage, limit: int
) -> None:
    """Each part retried on its own by the caller's retries (earlier parts are never sent
    twice); the ts of the newest part is what the next part's intent records."""
    preview_ts = None
    for answered in message.answers:
        if (preview_ts := await previews.take(answered)) is not None:
            break

    last = [message.reply_to or ""]  # the newest ts a part about to go out comes after

    async def one(index: int, part: str) -> None:
        if index == 0 and preview_ts:
            edit = partial(web.update, message.chat_id, preview_ts, part)
            if await previews.into(message.answers[0], preview_ts, edit):
                return
        key = part_key(message, index, part)
        if index == message.skip_parts and message.doubt is not None and key is not None:
            found = await find_posted(web, message.chat_id, message.thread_id, message.doubt, key)
            if found:  # it went out before the crash: not twice
                last[0] = found
                return
        ts = await web.post(message.chat_id, part, message.thread_id, metadata=metadata(key))
        last[0] = ts or last[0]

    parts = split_rendered_slack(message.text, limit)
    await send_parts(message, parts, one, lambda: last[0])
