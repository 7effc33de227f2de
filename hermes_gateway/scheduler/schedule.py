"""Schedules as users give them (``in 20m``, ``every 2h``, a 5-field cron expression, an ISO
timestamp) and their slots, in wall-clock time in the job's IANA zone so DST is right.

A slot is a whole epoch second. Cron expressions are evaluated on local wall-clock times by
croniter; a wall time that a spring-forward skips runs shifted by the gap (02:30 -> 03:30), a
wall time that a fall-back repeats runs once, at its first occurrence (PEP 495 ``fold=0``).
Intervals are elapsed time from their anchor and do not move with DST. No slot lies past
`LATEST`, and a schedule whose next slots cannot be computed is refused before it is stored.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

Kind = Literal["once", "interval", "cron"]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(
    r"(\d+)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w)\s*", re.I
)
_SEARCH_LIMIT = 5000  # candidates tried before a cron expression is declared to never match
# The latest slot a schedule may have, 9999-12-30T00:00Z: a day before the end of the last
# year a date can hold, so that any slot can be written as a date in any zone
LATEST = 253_402_214_400
LATEST_TEXT = "9999-12-30"
# An interval is kept in a 32-bit column (PostgreSQL's INTEGER): about 68 years
MAX_EVERY_S = 2**31 - 1
_DIGITS = 15  # a number of any unit longer than this lies past LATEST
# What computing or showing a slot of a schedule this code did not check can raise (croniter's
# errors are ValueErrors)
UNUSABLE = (ValueError, OverflowError, ArithmeticError, OSError, TypeError)


class ScheduleError(ValueError):
    """A schedule or time zone that cannot be used; the message says what would work."""


def zone_of(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):  # OSError: 'America'
        raise ScheduleError(
            f"unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin)"
        ) from None


def host_zone(localtime: Path = Path("/etc/localtime")) -> str:
    """The host's IANA zone from where /etc/localtime points; UTC when it cannot tell."""
    try:
        target = str(localtime.resolve())
    except OSError:
        return "UTC"
    _, found, name = target.partition("zoneinfo/")
    try:
        return name if found and ZoneInfo(name) else "UTC"
    except (ZoneInfoNotFoundError, ValueError):
        return "UTC"


def duration(text: str) -> int:
    """``"1h30m"`` -> 5400 seconds; `ScheduleError` for anything else."""
    pos, total = 0, 0
    text = text.strip()
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            raise ScheduleError(f"{text!r} is not a duration (e.g. 20m, 2h, 1h30m, 1d)")
        if len(m.group(1)) > _DIGITS:
            raise ScheduleError(f"{text!r} is too long: a schedule ends by {LATEST_TEXT}")
        total += int(m.group(1)) * _UNITS[m.group(2)[0].lower()]
        pos = m.end()
    if not text or total <= 0:
        raise ScheduleError(f"{text!r} is not a positive duration")
    return total


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule. ``anchor``: a one-shot's instant, an interval's first slot."""

    kind: Kind
    text: str
    zone: str
    anchor: int = 0
    every_s: int = 0

    def next_after(self, t: float) -> int | None:
        """The first slot strictly after ``t``; None when there is none (a past one-shot, or
        the next would lie past `LATEST`)."""
        if self.kind == "once":
            nxt: int | None = self.anchor if self.anchor > t else None
        elif self.kind == "interval":
            if t < self.anchor:
                nxt = self.anchor
            else:
                steps = math.floor((t - self.anchor) / self.every_s) + 1
                nxt = self.anchor + steps * self.every_s
        else:
            nxt = _cron_next(self.text, zone_of(self.zone), t) if t < LATEST else None
        return nxt if nxt is not None and nxt <= LATEST else None

    def latest_at_or_before(self, t: float) -> int | None:
        """The most recent slot at or before ``t``; None when none has come yet."""
        if self.kind == "once":
            return self.anchor if self.anchor <= t else None
        if self.kind == "interval":
            if t < self.anchor:
                return None
            return self.anchor + math.floor((t - self.anchor) / self.every_s) * self.every_s
        return _cron_prev(self.text, zone_of(self.zone), t)

    def count(self, after: float, until: float, cap: int = 1000) -> int:
        """How many slots fall in ``(after, until]``, counting at most ``cap``."""
        n, t = 0, after
        while n < cap:
            nxt = self.next_after(t)
            if nxt is None or nxt > until:
                break
            n, t = n + 1, nxt
        return n

    def period_s(self, now: float) -> float | None:
        """The gap between the next two slots (None for a one-shot)."""
        if self.kind == "interval":
            return float(self.every_s)
        first = self.next_after(now)
        second = self.next_after(first) if first is not None else None
        return None if first is None or second is None else float(second - first)


def parse(text: str, zone: str, now: float, *, min_interval_s: float = 60) -> Schedule:
    """Read a schedule as a user wrote it; relative forms are resolved against ``now``. It is
    checked whole: a schedule this returns has a next slot, and its slots can be computed."""
    return checked(_read(text, zone, now, min_interval_s), now)


def checked(schedule: Schedule, now: float) -> Schedule:
    """``schedule`` if its next two slots can be computed and the first is at most `LATEST`;
    else a `ScheduleError` that says which."""
    s = schedule
    if s.kind == "interval" and not 0 < s.every_s <= MAX_EVERY_S:
        raise ScheduleError(f"an interval must be at most {MAX_EVERY_S // 86400} days")
    try:
        first = s.next_after(now)
        if first is not None:
            s.next_after(first)  # a repeating schedule's period is asked for too
    except UNUSABLE as exc:
        raise ScheduleError(f"the next run of {s.text!r} cannot be computed: {exc}") from None
    if first is not None:
        return s
    if s.kind == "cron":
        raise ScheduleError(f"the cron expression {s.text!r} never matches before {LATEST_TEXT}")
    raise ScheduleError(
        f"{s.text!r} is too far ahead: its first run would be after {LATEST_TEXT}, the latest "
        "time a schedule can name"
    )


def _read(text: str, zone: str, now: float, min_interval_s: float) -> Schedule:
    zone_of(zone)
    raw = " ".join(text.split())
    low = raw.lower()
    if low.startswith("in "):
        return Schedule("once", raw, zone, anchor=math.ceil(now) + duration(raw[3:]))
    if low.startswith("every "):
        every = duration(raw[6:])
        if every < min_interval_s:
            raise ScheduleError(f"an interval must be at least {min_interval_s:g} s")
        return Schedule("interval", raw, zone, anchor=math.ceil(now) + every, every_s=every)
    if len(raw.split()) == 5:
        if not croniter.is_valid(raw):
            raise ScheduleError(f"{raw!r} is not a valid cron expression (min hour dom mon dow)")
        return Schedule("cron", raw, zone)
    try:
        when = datetime.fromisoformat(raw)
        at = math.ceil(_instant(when, zone_of(zone)))
    except (ValueError, OverflowError):
        pass
    else:
        if at <= now:
            raise ScheduleError(f"{raw} is in the past")
        return Schedule("once", raw, zone, anchor=at)
    raise ScheduleError(
        f"{raw!r} is not a schedule: use 'in 20m', 'every 2h', a cron expression such as "
        "'30 7 * * 1-5', or an ISO time such as 2027-02-28T09:00"
    )


def load(kind: str, text: str, zone: str, anchor: int, every_s: int) -> Schedule:
    """A stored schedule as it was parsed (relative forms are not resolved again). A row this
    code did not write (an older version's, or one put in the store by hand) is checked: a
    `ScheduleError` says what in it cannot be used."""
    if kind not in ("once", "interval", "cron"):
        raise ScheduleError(f"unknown schedule kind {kind!r}")
    if not isinstance(anchor, int) or not 0 <= anchor <= LATEST:
        raise ScheduleError(f"its first slot ({anchor!r}) is not a time by {LATEST_TEXT}")
    if kind == "interval" and not (isinstance(every_s, int) and 0 < every_s <= MAX_EVERY_S):
        raise ScheduleError(f"its interval ({every_s!r} s) is not between 1 s and 68 years")
    zone_of(zone)
    if kind == "cron":
        try:
            _parsed(text)
        except UNUSABLE:
            raise ScheduleError(f"{text!r} is not a valid cron expression") from None
    return Schedule(kind, text, zone, anchor, every_s)  # type: ignore[arg-type]


def slot_in_range(t: object) -> int | None:
    """A stored `next_run_at` as a slot; a `ScheduleError` when it is none."""
    if t is None or (isinstance(t, int) and 0 <= t <= LATEST):
        return t
    raise ScheduleError(f"its next run ({t!r}) is not a time by {LATEST_TEXT}")


def _instant(local: datetime, tz: ZoneInfo) -> float:
    """The epoch time of a wall-clock time in ``tz`` (an aware one keeps its own offset)."""
    if local.tzinfo is None:
        local = local.replace(tzinfo=tz, fold=0)
    return local.timestamp()


def _naive_local(t: float, tz: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(t, tz).replace(tzinfo=None, fold=0)


@lru_cache(maxsize=256)
def _parsed(expr: str) -> croniter:
    """The expression parsed once: parsing is half of what a fresh croniter costs."""
    return croniter(expr, datetime(2000, 1, 1))


def _iterator(expr: str, start: datetime) -> croniter:
    # a copy of the parsed one, moved to ``start`` as croniter's constructor does (iterating
    # copies the fields it changes, so the parsed one is never altered)
    it = copy.copy(_parsed(expr))
    it.set_current(start, force=True)
    return it


# A slot is a pure function of (expression, zone, time), and a burst of jobs due together
# asks the same few questions (jobs of one expression, the tick's one `now`) thousands of times
@lru_cache(maxsize=4096)
def _cron_next(expr: str, tz: ZoneInfo, t: float) -> int | None:
    it = _iterator(expr, _naive_local(t, tz))
    try:
        for _ in range(_SEARCH_LIMIT):
            # a candidate lies before `t` only inside a fall-back's repeated hour (first pass)
            at = _instant(it.get_next(datetime), tz)
            if at > t:
                return math.ceil(at)
    except (ValueError, OverflowError):  # CroniterBadDateError (February 30th); year 10000
        pass
    return None


@lru_cache(maxsize=4096)
def _cron_prev(expr: str, tz: ZoneInfo, t: float) -> int | None:
    it = _iterator(expr, _naive_local(t, tz) + timedelta(seconds=1))
    try:
        for _ in range(_SEARCH_LIMIT):
            at = _instant(it.get_prev(datetime), tz)
            if at <= t:
                return math.ceil(at)
    except CroniterBadDateError:
        pass
    return None
