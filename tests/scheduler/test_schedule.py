"""Slots of one-shot, interval and cron schedules against a clock the test sets: DST in two
zones (a spring-forward 02:30 runs once, shifted; a fall-back's repeated 01:30 runs once), a
leap day, and the forms a user may write."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from hermes_gateway.scheduler.schedule import (
    LATEST,
    Schedule,
    ScheduleError,
    duration,
    load,
    parse,
)

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def at(zone: str, *fields: int, fold: int = 0) -> float:
    return datetime(*fields, tzinfo=ZoneInfo(zone), fold=fold).timestamp()  # type: ignore[misc]


def local(zone: str, t: float | None) -> str:
    assert t is not None
    return datetime.fromtimestamp(t, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %z")


def slots(schedule: Schedule, start: float, n: int) -> list[str]:
    out, t = [], start
    for _ in range(n):
        nxt = schedule.next_after(t)
        assert nxt is not None
        out.append(local(schedule.zone, nxt))
        t = nxt
    return out


@pytest.mark.parametrize(
    ("zone", "day"),
    [(BERLIN, (2026, 3, 28)), (NEW_YORK, (2026, 3, 7))],
)
def test_a_daily_0230_runs_once_on_the_spring_forward_day_shifted_by_the_gap(
    zone: str, day: tuple[int, int, int]
) -> None:
    daily = parse("30 2 * * *", zone, at(zone, *day, 12))
    got = slots(daily, at(zone, *day, 12), 3)
    offset = "+0200" if zone == BERLIN else "-0400"
    nxt, after = day[2] + 1, day[2] + 2
    assert got == [
        f"2026-03-{nxt:02d} 03:30 {offset}",  # 02:30 does not exist that night
        f"2026-03-{after:02d} 02:30 {offset}",
        f"2026-03-{after + 1:02d} 02:30 {offset}",
    ]


@pytest.mark.parametrize(
    ("zone", "expr", "day", "first", "then"),
    [
        (NEW_YORK, "30 1 * * *", (2026, 11, 1), "2026-11-01 01:30 -0400", "2026-11-02 01:30 -0500"),
        (BERLIN, "30 2 * * *", (2026, 10, 25), "2026-10-25 02:30 +0200", "2026-10-26 02:30 +0100"),
    ],
)
def test_a_wall_time_the_fall_back_repeats_runs_once(
    zone: str, expr: str, day: tuple[int, int, int], first: str, then: str
) -> None:
    """``day``: the night the clocks go back."""
    eve = at(zone, *day, 0, 5)
    daily = parse(expr, zone, eve)
    assert slots(daily, eve, 2) == [first, then]
    # asked again from inside the repeated hour (its second pass), it is still tomorrow
    hour = 1 if zone == NEW_YORK else 2
    second_pass = at(zone, *day, hour, 45, fold=1)
    assert local(zone, daily.next_after(second_pass)) == then
    assert local(zone, daily.latest_at_or_before(second_pass)) == first


def test_an_interval_is_elapsed_time_across_dst() -> None:
    start = at(BERLIN, 2026, 3, 29, 0, 0)
    every = parse("every 2h", BERLIN, start)
    assert slots(every, start, 3) == [
        "2026-03-29 03:00 +0200",  # 2 h elapsed: the clock jumped one hour too
        "2026-03-29 05:00 +0200",
        "2026-03-29 07:00 +0200",
    ]
    assert every.next_after(start) == start + 7200


def test_one_shots_relative_and_iso_in_the_jobs_zone() -> None:
    now = at(NEW_YORK, 2026, 11, 1, 0, 50)
    soon = parse("in 20m", NEW_YORK, now)
    assert soon.next_after(now) == now + 1200
    assert soon.next_after(now + 1200) is None  # it runs once
    # a naive ISO time is wall-clock in the job's zone; the repeated 01:30 is the first one
    iso = parse("2026-11-01T01:30", NEW_YORK, now)
    assert local(NEW_YORK, iso.anchor) == "2026-11-01 01:30 -0400"
    aware = parse("2026-11-01T07:00:00Z", BERLIN, now)
    assert aware.anchor == datetime(2026, 11, 1, 7, tzinfo=UTC).timestamp()
    with pytest.raises(ScheduleError, match="in the past"):
        parse("2026-10-01T09:00", NEW_YORK, now)


def test_a_leap_day() -> None:
    now = at(BERLIN, 2026, 3, 1, 12)
    feb29 = parse("0 9 29 2 *", BERLIN, now)
    assert slots(feb29, now, 2) == ["2028-02-29 09:00 +0100", "2032-02-29 09:00 +0100"]
    assert local(BERLIN, parse("2028-02-29T09:00", BERLIN, now).anchor) == "2028-02-29 09:00 +0100"
    with pytest.raises(ScheduleError):
        parse("2027-02-29T09:00", BERLIN, now)  # no such day
    daily = parse("0 0 * * *", BERLIN, at(BERLIN, 2028, 2, 28, 12))
    assert slots(daily, at(BERLIN, 2028, 2, 28, 12), 2) == [
        "2028-02-29 00:00 +0100",
        "2028-03-01 00:00 +0100",
    ]


def test_weekday_cron_and_missed_slot_counting() -> None:
    now = at(BERLIN, 2026, 12, 4, 8)  # a Friday
    weekdays = parse("30 7 * * 1-5", BERLIN, now)
    assert slots(weekdays, now, 2) == ["2026-12-07 07:30 +0100", "2026-12-08 07:30 +0100"]
    hourly = parse("0 * * * *", BERLIN, now)
    assert hourly.count(now, now + 5 * 3600) == 5
    assert hourly.latest_at_or_before(now + 5 * 3600 + 59) == now + 5 * 3600
    assert hourly.period_s(now) == 3600


@pytest.mark.parametrize(
    "bad",
    ["30m", "every 0m", "every 10s", "61 * * * *", "in soon", "0 0 30 2 *", "* * * * * *"],
)
def test_what_is_not_a_schedule_is_refused_with_a_hint(bad: str) -> None:
    with pytest.raises(ScheduleError):
        parse(bad, "UTC", 1_800_000_000)


def test_durations_and_zones() -> None:
    assert duration("1h30m") == 5400
    assert duration("2 hours 5 minutes") == 7500
    assert parse("every 10s", "UTC", 0, min_interval_s=1).every_s == 10
    with pytest.raises(ScheduleError, match="time zone"):
        parse("in 5m", "Mars/Olympus", 0)


@pytest.mark.parametrize(
    ("text", "zone", "says"),
    [
        ("in 99999999999d", "UTC", "too far ahead"),
        ("in 3000000d", "UTC", "too far ahead"),  # the year 10240: no date holds it
        ("in 1" + "0" * 5000 + "s", "UTC", "too long"),  # more digits than int() reads
        ("every 99999999999d", "UTC", "at most 24855 days"),  # the store's 32-bit column
        ("9999-12-31T23:59", "UTC", "too far ahead"),
        ("9999-12-31T23:59-12:00", "UTC", "too far ahead"),  # the year 10000 in UTC
        ("in 5m", "America", "time zone"),  # a folder of zones, not one
        ("in 5m", "Z" * 5000, "time zone"),  # a file name too long
    ],
)
def test_a_schedule_whose_next_slots_cannot_be_computed_is_refused(
    text: str, zone: str, says: str
) -> None:
    """Refused when parsed, with the reason; before, these returned a schedule whose slot no
    date could show (or raised an OSError or a bare ValueError)."""
    with pytest.raises(ScheduleError, match=says):
        parse(text, zone, 1_800_000_000)


def test_no_slot_lies_past_the_latest_a_schedule_can_name() -> None:
    """A schedule that parsed runs out at `LATEST` rather than naming an unshowable year."""
    yearly = parse("0 0 1 1 *", "UTC", 1_800_000_000)
    assert yearly.next_after(LATEST - 3600) is None
    daily = parse("every 1d", "UTC", 1_800_000_000)
    assert daily.next_after(LATEST) is None
    assert parse("9999-12-29T00:00", "Pacific/Kiritimati", 1_800_000_000).anchor <= LATEST


@pytest.mark.parametrize(
    ("kind", "zone", "anchor", "every_s", "says"),
    [
        ("weekly", "UTC", 0, 0, "unknown schedule kind"),
        ("once", "UTC", 8_640_001_796_432_418, 0, "not a time"),
        ("interval", "UTC", 1_800_000_000, 0, "interval"),
        ("cron", "Mars/Olympus", 0, 0, "time zone"),
    ],
)
def test_a_stored_schedule_is_checked_when_loaded(
    kind: str, zone: str, anchor: int, every_s: int, says: str
) -> None:
    with pytest.raises(ScheduleError, match=says):
        load(kind, "0 * * * *", zone, anchor, every_s)
    with pytest.raises(ScheduleError, match="not a valid cron"):
        load("cron", "61 * * * *", "UTC", 0, 0)
