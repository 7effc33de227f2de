"""The REST catch-up after a (re)connect or a ``seq`` gap: each channel's posts since its
cursor, oldest first, taken like live ones (the adapter skips those it took, the inbox any it
stored before a restart)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import structlog

from adapters.mattermost.api import MattermostApi
from adapters.mattermost.cursor import Cursors, Mark, as_ms
from adapters.mattermost.inbound import Posted
from hermes_gateway.platforms import AdapterError

log = structlog.get_logger("hermes.adapters.mattermost")
Take = Callable[[Posted], Awaitable[None]]
ChannelType = Callable[[str], Awaitable[str]]


class CatchUp:
    """Which channels: the bot's channels in its teams, DMs included (GET /users/me/teams/{id}/
    channels), whose ``last_post_at`` is past their cursor; one the bot never saw a post in (a
    DM opened while it was down) starts from the newest post it saw anywhere. When that listing
    fails, the channels with a cursor are read."""

    def __init__(self, api: MattermostApi, cursors: Cursors, max_age_s: float) -> None:
        self.api = api
        self.cursors = cursors
        self.max_age_s = max_age_s

    async def run(self, take: Take, channel_type: ChannelType) -> int:
        """Take what each channel got since its cursor; how many posts were taken."""
        taken = 0
        due = await self._due()
        for channel, mark in due.items():
            try:
                kind = mark.channel_type or await channel_type(channel)
                # strictly after ``since``: a post in the cursor's own millisecond is read too
                # (the one seen last among them again, which the intake skips)
                posts = await self.api.posts_since(channel, mark.at_ms - 1)
            except AdapterError as exc:
                log.warning("mattermost.catch_up_failed", channel=channel, error=str(exc))
                continue
            for post in posts:
                posted = Posted(post, kind)
                if posted.create_at >= mark.at_ms:
                    await take(posted)
                    taken += 1
        log.info("mattermost.caught_up", channels=len(due), posts=taken)
        return taken

    async def _due(self) -> dict[str, Mark]:
        """The channels to read, each from where: no older than `max_age_s`."""
        floor = int(time.time() * 1000) - int(self.max_age_s * 1000)
        marks = self.cursors.recent(self.max_age_s)
        newest = self.cursors.newest()
        if not newest:
            return {}  # never saw a post: nothing was missed that it could have answered
        try:
            channels = await self.api.my_channels()
        except AdapterError as exc:
            log.warning("mattermost.channels_unlisted", error=str(exc))
            return marks
        due = dict(marks)  # a channel not listed (a bot in no team) is read from its cursor
        for channel in channels:
            channel_id, kind = str(channel["id"]), str(channel.get("type") or "")
            mark = marks.get(channel_id) or Mark(max(newest, floor), kind)
            if as_ms(channel.get("last_post_at")) >= mark.at_ms:
                due[channel_id] = Mark(mark.at_ms, mark.channel_type or kind)
            else:
                due.pop(channel_id, None)  # nothing posted there since
        return due
