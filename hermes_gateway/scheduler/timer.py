"""`hermes cron export-timer ID`: a systemd `.timer` + `.service` pair that runs
`hermes cron run ID` on the job's schedule, for jobs that must fire even when the gateway is
down. A cron expression becomes an `OnCalendar=` line in the job's zone (lists, ranges and
steps of the forms cron and systemd share); an interval `OnUnitActiveSec=`; a one-shot its
calendar instant in UTC."""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

from hermes_gateway.scheduler.schedule import Schedule, ScheduleError

_DAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_ITEM = re.compile(r"^(\*|\d+)(?:-(\d+))?(?:/(\d+))?$")


def _field(value: str, width: int) -> str:
    """One cron field as systemd writes it: ``*/15`` -> ``00/15``, ``1-5`` -> ``01..05``."""
    out = []
    for item in value.split(","):
        m = _ITEM.match(item)
        if m is None:
            raise ScheduleError(f"the cron field {value!r} has no systemd calendar form")
        start, end, step = m.groups()
        first = "*" if start == "*" else start.zfill(width)
        text = first if end is None else f"{first}..{end.zfill(width)}"
        if step is not None:
            if end is not None:
                raise ScheduleError(f"the cron field {value!r} has no systemd calendar form")
            text = f"{'0'.zfill(width) if start == '*' else first}/{step}"
        out.append(text)
    return ",".join(out)


def _weekdays(value: str) -> str:
    if value == "*":
        return ""
    out = []
    for item in value.split(","):
        start, _, end = item.partition("-")
        if not start.isdigit() or (end and not end.isdigit()) or "/" in item:
            raise ScheduleError(f"the day-of-week field {value!r} has no systemd calendar form")
        name = _DAYS[int(start)]
        out.append(f"{name}..{_DAYS[int(end)]}" if end else name)
    return ",".join(out) + " "


def on_calendar(expr: str, zone: str) -> str:
    minute, hour, dom, month, dow = expr.split()
    date = f"*-{_field(month, 2)}-{_field(dom, 2)}"
    clock = f"{_field(hour, 2)}:{_field(minute, 2)}:00"
    return f"{_weekdays(dow)}{date} {clock} {zone}"


def _unit_word(text: str) -> str:
    """``text`` as systemd reads it in ExecStart/Environment: ``%`` starts a specifier and
    ``$`` a variable there, so each is doubled to stand for itself."""
    return text.replace("%", "%%").replace("$", "$$")


def _environment(key: str, value: str) -> str:
    pair = _unit_word(f"{key}={value}")
    if any(c.isspace() or c in '"\\' for c in pair):
        pair = '"' + pair.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"Environment={pair}"


def render(
    job_id: str,
    name: str,
    schedule: Schedule,
    hermes: list[str],
    home: str,
    config: str | None = None,
) -> tuple[str, str]:
    """The .timer and .service files' text; ``hermes`` is the command that runs the CLI. The
    service carries ``home`` and the config file, so that its run, with the gateway down,
    opens the same store and finds the same job as the CLI that exported it."""
    if schedule.kind == "cron":
        when = f"OnCalendar={on_calendar(schedule.text, schedule.zone)}\nPersistent=true"
    elif schedule.kind == "interval":
        when = f"OnActiveSec={schedule.every_s}s\nOnUnitActiveSec={schedule.every_s}s"
    else:
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(schedule.anchor))
        when = f"OnCalendar={at}\nPersistent=true"
    command = _unit_word(
        shlex.join([*hermes, "cron", *(["--config", config] if config else []), "run", job_id])
    )
    timer = (
        f"[Unit]\nDescription=Hermes scheduled job {job_id} ({name})\n\n"
        f"[Timer]\n{when}\nAccuracySec=1s\nUnit=hermes-job-{job_id}.service\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
    service = (
        f"[Unit]\nDescription=Hermes scheduled job {job_id} ({name})\n\n"
        f"[Service]\nType=oneshot\nExecStart={command}\n"
        f"{_environment('HERMES_HOME', home)}\n"
        f"EnvironmentFile=-{_unit_word(str(Path(home) / 'gateway.env'))}\n"
    )
    return timer, service
