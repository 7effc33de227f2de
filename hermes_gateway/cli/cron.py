"""`hermes cron list|add|rm|pause|resume|run|runs|export-timer`: the operator's view of
scheduled jobs, through the running gateway's control API (`/v1/cron/jobs`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from hermes_gateway.config import Config

EXIT_OK = 0
EXIT_FAILURE = 1
CELL = 60  # the OUTPUT column of `hermes cron runs`, without --full
OFF = "hermes: the gateway's scheduler is off (set scheduler.enabled: true and restart it)"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cron = sub.add_parser("cron", help="scheduled jobs")
    cron.add_argument("--config", help="config file (default: $HERMES_HOME/config.yaml)")
    cron.add_argument("--url", help="control API base URL (default: from the config)")
    csub = cron.add_subparsers(dest="action", required=True)
    csub.add_parser("list", help="every job, its next run and state")
    add = csub.add_parser("add", help="create a job")
    add.add_argument("schedule", help="'in 20m', 'every 2h', '30 7 * * 1-5' or an ISO time")
    add.add_argument("prompt", help="what the job's agent turn is asked")
    add.add_argument(
        "--deliver",
        default="none",
        help="platform:chat_id[:thread_id] of a platform enabled in the config, or none",
    )
    add.add_argument("--name", default="")
    add.add_argument("--timezone", default="", help="IANA zone (default: scheduler.timezone)")
    add.add_argument("--repeat", type=int, help="run at most this many times")
    for name, text in (
        ("rm", "remove a job and its runs"),
        ("pause", "stop running it until resumed"),
        ("resume", "run it again from its next slot"),
        ("run", "run it now, whatever its schedule"),
    ):
        csub.add_parser(name, help=text).add_argument("job_id")
    runs = csub.add_parser(
        "runs",
        help="its recent runs",
        description="A job's newest 50 runs, newest first, their slots in the job's zone. "
        f"Each output is cut to {CELL} characters on one line unless --full is given.",
    )
    runs.add_argument("job_id")
    runs.add_argument(
        "--full", action="store_true", help="print each run's whole output under its line"
    )
    export = csub.add_parser("export-timer", help="a systemd .timer/.service pair for it")
    export.add_argument("job_id")
    export.add_argument(
        "--dir", help="write the two files here, made if missing (default: print them)"
    )


def run_cron(
    args: argparse.Namespace, url: str, token: str | None, config: Config | None = None
) -> int:
    import httpx  # here, not at import: `hermes --help` stays light

    from hermes_gateway.cli.control_client import refused, unreachable

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            response = _call(client, args)
    except httpx.ConnectError as exc:
        if args.action != "run" or config is None:
            return unreachable(url, exc)
        # nothing listens: an exported timer fired while the gateway is down; run it here
        from hermes_gateway.scheduler.offline import run_offline

        return asyncio.run(run_offline(config, args.config, args.job_id))
    except httpx.HTTPError as exc:
        return unreachable(url, exc)
    data: dict[str, Any] = response.json()
    if response.status_code == 404 and args.action == "list":
        print(OFF, file=sys.stderr)
        return EXIT_FAILURE
    if response.status_code != 200:
        return refused(response, data)
    return _show(args, data, config)


def _call(client: httpx.Client, args: argparse.Namespace) -> httpx.Response:
    base = "/v1/cron/jobs"
    if args.action == "list":
        return client.get(base)
    if args.action == "add":
        body = {
            "schedule": args.schedule,
            "prompt": args.prompt,
            "deliver": args.deliver,
            "name": args.name or None,
            "timezone": args.timezone or None,
            "repeat": args.repeat,
        }
        return client.post(base, json={k: v for k, v in body.items() if v is not None})
    if args.action == "rm":
        return client.delete(f"{base}/{args.job_id}")
    if args.action == "runs":
        query = "?full=1" if args.full else ""
        return client.get(f"{base}/{args.job_id}/runs{query}")
    if args.action == "export-timer":
        return client.get(f"{base}/{args.job_id}")
    return client.post(f"{base}/{args.job_id}/{args.action}")


def _show(args: argparse.Namespace, data: dict[str, Any], config: Config | None) -> int:
    if args.action == "list":
        print_jobs(data["jobs"])
    elif args.action == "add":
        job = data["job"]
        print(f"created job {job['id']}; first run {_when(job['next_run_at'], job['timezone'])}")
    elif args.action == "runs":
        print_runs(data["runs"], data.get("timezone") or "UTC", full=args.full)
    elif args.action == "export-timer":
        return _export(args, data["job"], config)
    elif args.action == "rm":
        print(f"removed job {data['removed']}")
    else:
        print(data["result"])
    return EXIT_OK


def _export(args: argparse.Namespace, job: dict[str, Any], config: Config | None) -> int:
    from hermes_gateway.config import config_path
    from hermes_gateway.scheduler.schedule import ScheduleError, load
    from hermes_gateway.scheduler.timer import render

    hermes = [sys.executable, "-m", "hermes_gateway"]
    # the file and home this CLI read, absolute: the timer's run has neither its shell nor
    # its working directory, and must open the same store to find the job
    found = config_path(args.config)
    config_file = str(found.resolve()) if found is not None else None
    home = str((config.home_path if config is not None else Path("~/.hermes")).expanduser())
    try:
        if job.get("error"):
            raise ScheduleError(f"job {job['id']}: {job['error']}")
        s = job
        schedule = load(s["kind"], s["schedule"], s["timezone"], s["anchor"], s["every_s"])
        timer, service = render(
            job["id"], job["name"], schedule, hermes, str(Path(home).resolve()), config_file
        )
    except ScheduleError as exc:
        print(f"hermes: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if not args.dir:
        print(
            f"# hermes-job-{job['id']}.timer\n{timer}\n# hermes-job-{job['id']}.service\n{service}"
        )
        return EXIT_OK
    folder = Path(args.dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)  # a unit folder not made yet is made
        (folder / f"hermes-job-{job['id']}.timer").write_text(timer)
        (folder / f"hermes-job-{job['id']}.service").write_text(service)
    except OSError as exc:
        print(f"hermes: cannot write the units to {folder}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"wrote hermes-job-{job['id']}.timer and .service to {folder}")
    return EXIT_OK


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    """Every job, its next run in its own zone (named, as zones differ from job to job)."""
    if not jobs:
        print("no scheduled jobs")
        return
    nexts = [_when(j["next_run_at"], j.get("timezone") or "UTC") for j in jobs]
    wide = max(len("NEXT RUN"), *map(len, nexts))
    print(f"{'ID':<9} {'STATE':<7} {'NEXT RUN':<{wide}} {'RUNS':>4}  {'SCHEDULE':<20} NAME")
    for j, nxt in zip(jobs, nexts, strict=True):
        state = "error" if j.get("error") else j["state"]
        print(
            f"{j['id']:<9} {state:<7} {nxt:<{wide}} {j['runs']:>4}  "
            f"{j['schedule'][:20]:<20} {j['name']}"
        )
        if j.get("error"):  # a stored schedule that cannot be used: why, under its line
            print(f"{'':<9} error: {j['error']}")


def print_runs(runs: list[dict[str, Any]], zone: str, *, full: bool = False) -> None:
    """A job's runs, slots in ``zone``; each output on its line cut to `CELL` characters, or
    with ``full`` whole and as written, under its line."""
    if not runs:
        print("no runs yet")
        return
    slots = [_when(r["scheduled_for"], zone) for r in runs]
    wide = max(len("SLOT"), *map(len, slots))
    print(f"{'RUN':>6}  {'SLOT':<{wide}} {'KIND':<9} {'STATUS':<10} {'DELIVERY':<10} OUTPUT")
    cut = False
    for r, slot in zip(runs, slots, strict=True):
        whole = r.get("error") or r.get("output") or ""
        out = whole.replace("\n", " ")
        if full:
            out = ""
        elif len(out) > CELL:
            out, cut = out[: CELL - 1] + "…", True
        print(
            f"{r['id']:>6}  {slot:<{wide}} {r['kind']:<9} {r['status']:<10} "
            f"{r['delivery']:<10} {out}".rstrip()
        )
        if full and whole:
            print("\n".join(f"        {line}" for line in whole.splitlines()))
    if cut:
        print(f"(outputs cut to {CELL} characters: hermes cron runs ID --full shows them whole)")


def _when(t: float | None, zone: str = "UTC") -> str:
    """A slot as a date in ``zone``, named; UTC when the zone is not one this host knows."""
    from datetime import datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if t is None:
        return "-"
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):  # a row's stray zone
        tz, zone = ZoneInfo("UTC"), "UTC"
    try:
        return datetime.fromtimestamp(t, tz).strftime(f"%Y-%m-%d %H:%M {zone}")
    except (ValueError, OverflowError, OSError, TypeError):  # a gateway's slot past year 9999
        return f"{t}?"
