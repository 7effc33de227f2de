"""The ids a Discord shard keeps for its next holder never pass a message still being taken,
and the next holder merges what it reads back with what it sees."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import discord

from adapters.discord.catchup import CatchUp
from adapters.discord.handover import IntakeMarks, parse


def message(channel: int, message_id: int) -> discord.Message:
    return cast(Any, SimpleNamespace(id=message_id, channel=SimpleNamespace(id=channel)))


def test_a_kept_id_stays_below_a_message_still_being_taken() -> None:
    marks = IntakeMarks()
    first, second, third = message(7, 100), message(7, 200), message(8, 300)
    for m in (first, second, third):
        marks.begin(m)
    marks.end(second)  # taken before the first one was
    marks.end(third)
    assert marks.snapshot() == {"7": "99", "8": "300"}  # 100 is fetched again if lost now
    marks.end(first)
    assert marks.snapshot() == {"7": "200", "8": "300"} and marks.dirty


def test_what_the_last_holder_kept_is_merged_and_a_newer_id_seen_here_stays() -> None:
    marks = IntakeMarks()
    marks.begin(message(7, 500))
    marks.end(message(7, 500))
    marks.merge(parse({"7": "400", "9": "450", "bad": "x"}))
    assert marks.snapshot() == {"9": "450", "7": "500"}


def test_kept_ids_older_than_the_catch_up_age_are_not_fetched_after() -> None:
    now = discord.utils.time_snowflake(discord.utils.utcnow())
    old = discord.utils.time_snowflake(discord.utils.utcnow().replace(year=2020))
    catchup = CatchUp()
    catchup.resume({7: now, 8: old})
    cutoff = catchup._last[8][1]
    assert catchup._last[7][0] == now and cutoff < catchup._last[7][1]
    assert catchup._last[7][1] - cutoff > CatchUp.max_age_s  # run() skips channel 8
