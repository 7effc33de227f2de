"""The `hermes` command line: run, install and inspect the gateway; chat; pairing; the
inbox's quarantined messages; doctor.

The only module that picks exit codes (returned by `main`): 0 clean stop, 75 restart wanted,
78 configuration error (systemd must not restart).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
from collections.abc import Sequence

from hermes_gateway import __version__
from hermes_gateway.config import Config, config_path, load_config
from hermes_gateway.control.token import operator_token
from hermes_gateway.errors import AdapterAuthError, ConfigError, StoreError
from hermes_gateway.liveness.early_stop import EARLY

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_RESTART = 75
EXIT_CONFIG = 78


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes", description="Hermes Gateway")
    parser.add_argument("--version", action="version", version=f"hermes {__version__}")
    sub = parser.add_subparsers(dest="command")
    _gateway_parser(sub)

    chat = _with_config(sub.add_parser("chat", help="chat with the running gateway"))
    chat.add_argument("--session", default="terminal", help="session name (default: terminal)")
    chat.add_argument("--url", help="control API base URL (default: from the config)")
    chat.add_argument("--no-stream", action="store_true", help="wait for whole replies")

    pairing = _with_config(sub.add_parser("pairing", help="approve users who asked for access"))
    pairing.add_argument("--url", help="control API base URL (default: from the config)")
    psub = pairing.add_subparsers(dest="action", required=True)
    psub.add_parser("list", help="pending codes and approved users")
    approve = psub.add_parser("approve", help="approve a pairing code")
    approve.add_argument("platform")
    approve.add_argument("code")
    revoke = psub.add_parser("revoke", help="remove an approved user")
    revoke.add_argument("platform")
    revoke.add_argument("user_id")

    inbox = _with_config(sub.add_parser("inbox", help="messages held back after crashes"))
    inbox.add_argument("--url", help="control API base URL (default: from the config)")
    isub = inbox.add_subparsers(dest="action", required=True)
    isub.add_parser("list", help="quarantined messages")
    for name, text in (("retry", "process a quarantined message again"), ("drop", "discard it")):
        isub.add_parser(name, help=text).add_argument("inbox_id", type=int)

    dash = _with_config(sub.add_parser("dashboard", help="print (and open) the dashboard's URL"))
    dash.add_argument("--url", help="control API base URL (default: from the config)")
    dash.add_argument("--no-open", action="store_true", help="only print the URL")

    from hermes_gateway.cli.cron import add_parser as cron_parser

    cron_parser(sub)
    from hermes_gateway.cli.mcp import add_parser as mcp_parser

    mcp_parser(sub, _with_config)
    _with_config(sub.add_parser("doctor", help="check config, tokens, model, store, port"))
    memory = sub.add_parser("memory", help="per-user memory")
    msub = memory.add_subparsers(dest="action", required=True)
    claim = _with_config(msub.add_parser("claim", help="give the old MEMORY.md to its owner"))
    claim.add_argument("platform", help="e.g. telegram")
    claim.add_argument("user_id", help="the owner's id on that platform")
    from hermes_gateway.cli.forget import add_parser as forget_parser

    forget_parser(msub, _with_config)
    db = _with_config(sub.add_parser("db", help="the store's schema revision"))
    dsub = db.add_subparsers(dest="action", required=True)
    dsub.add_parser("current", help="the database's schema revision and this release's")
    dsub.add_parser("upgrade", help="bring the database to this release's revision")
    config = sub.add_parser("config", help="configuration tools")
    csub = config.add_subparsers(dest="action", required=True)
    _with_config(csub.add_parser("check", help="validate the config (exit 78 if invalid)"))
    sub.add_parser("version", help="print the version")
    return parser


def _gateway_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gateway = sub.add_parser("gateway", help="run and manage the gateway daemon")
    gsub = gateway.add_subparsers(dest="action", required=True)
    _with_config(gsub.add_parser("run", help="run the gateway in the foreground"))
    for name, text in (
        ("install", "install as a systemd service and start it"),
        ("uninstall", "stop and remove the systemd service"),
    ):
        p = _with_config(gsub.add_parser(name, help=text))
        _scope(p)
        p.add_argument("--dry-run", action="store_true", help="print, change nothing")
    for name in ("start", "stop", "restart"):
        _scope(_with_config(gsub.add_parser(name, help=f"{name} the installed service")))
    status = _with_config(gsub.add_parser("status", help="service, process and /status"))
    status.add_argument("--url", help="control API base URL (default: from the config)")
    status.add_argument(
        "--cluster", action="store_true", help="every instance, leader leases, lease ages"
    )
    logs = _with_config(gsub.add_parser("logs", help="show the gateway's logs readably"))
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("--since", help="only lines newer than this (10m, 2h, 1d, ISO time)")
    logs.add_argument("--level", choices=["debug", "info", "warning", "error", "critical"])
    logs.add_argument("--session", help="only lines of this session key (substring)")
    logs.add_argument("--platform", help="only lines of this platform")
    logs.add_argument("--json", action="store_true", help="print the JSON lines as they are")


def _with_config(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--config", help="config file (default: $HERMES_HOME/config.yaml)")
    return p


def _scope(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--user", dest="user_unit", action="store_true", default=None)
    group.add_argument("--system", dest="user_unit", action="store_false")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `hermes`: what it can do, not a usage error
        parser.print_help()
        return EXIT_OK
    if args.command == "gateway" and args.action == "run":
        EARLY.install()  # a stop while it imports and starts: exit 0 at once, not killed
        gc.disable()  # as `python -m hermes_gateway` does (see there); on again once it is up
    try:
        return _dispatch(args)
    except BrokenPipeError:
        # `hermes gateway logs | head`: the reader has seen enough; no traceback, and no
        # second error when Python flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "version":
        print(f"hermes {__version__}")
        return EXIT_OK
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"hermes: configuration error: {exc}", file=sys.stderr)
        for other in exc.others if args.command == "config" else ():
            print(f"hermes: configuration error: {other}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "config":
        return _config_checked(args, config)
    url = getattr(args, "url", None) or (
        f"http://{_client_host(config.control.host)}:{config.control.port}"
    )
    # operator routes always want it: the configured one, else the gateway's generated file
    token = operator_token(config.control.token, config.home_path)
    if (code := _as_client(args, config, url, token)) is not None:
        return code
    if args.command == "doctor":
        return run_doctor(config)
    if args.command == "memory":
        from hermes_gateway.memory.claim import run_claim

        return run_claim(config.home_path, args.platform, args.user_id)
    if args.command == "db":
        from hermes_gateway.cli.db import run_db

        return run_db(args.action, config.store_url)
    if args.action == "run":
        return run_gateway(config, args.config)
    return _manage(args, config, url, token)


def _config_checked(args: argparse.Namespace, config: Config) -> int:
    checked = config_path(args.config)
    print(f"config OK: {checked or 'no config file, built-in defaults'} (home: {config.home})")
    stray = config.home_path / "config.yml"
    if checked is None and stray.exists():
        print(f"note: {stray} is not read; the file must be named config.yaml")
    return EXIT_OK


def _as_client(args: argparse.Namespace, config: Config, url: str, token: str | None) -> int | None:
    """The commands that talk to the running gateway's control API (None: not one of them)."""
    if args.command == "chat":
        from hermes_gateway.cli.chat import run_chat

        history = config.home_path / "chat_history"
        return run_chat(url, token, args.session, stream=not args.no_stream, history_file=history)
    if args.command == "pairing":
        from hermes_gateway.cli.control_client import run_pairing

        return run_pairing(args, url, token)
    if args.command == "inbox":
        from hermes_gateway.cli.inbox import run_inbox

        return run_inbox(args, url, token, config.store_url)
    if args.command == "dashboard":
        from hermes_gateway.dashboard.cli import run_dashboard

        return run_dashboard(url, config, token, opener=None if args.no_open else "browser")
    if args.command == "cron":
        from hermes_gateway.cli.cron import run_cron

        return run_cron(args, url, token, config)
    if args.command == "mcp":
        from hermes_gateway.cli.mcp import run_mcp

        return run_mcp(args, url, token, config)
    if args.command == "memory" and args.action == "forget":
        from hermes_gateway.cli.forget import run_forget

        return run_forget(args, url, token, config.store_url, config.memory.scope)
    return None


def _manage(args: argparse.Namespace, config: Config, url: str, token: str | None) -> int:
    if args.action == "logs":
        return run_logs(args, config)
    from hermes_gateway.cli.systemd import ServiceManager, UnitParams

    user_unit = getattr(args, "user_unit", None)
    if user_unit is None:
        user_unit = os.geteuid() != 0
    config_path = args.config or str(config.home_path / "config.yaml")
    manager = ServiceManager(
        UnitParams.from_config(config, config_path),
        user_unit=user_unit,
        dry_run=getattr(args, "dry_run", False),
    )
    if args.action == "status":
        from hermes_gateway.cli.status import gateway_status

        state = manager.state()
        return gateway_status(url, token, state, sys.stdout, args.cluster)
    if args.action == "install":
        return manager.install()
    if args.action == "uninstall":
        return manager.uninstall()
    if not manager.installed():
        print(
            "hermes: the service is not installed; run `hermes gateway install`, "
            "or `hermes gateway run` in the foreground",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return manager.control(args.action)


def run_doctor(config: Config) -> int:
    from hermes_gateway.cli.doctor import Doctor, render

    checks = Doctor(config).run()
    render(checks, sys.stdout, color=sys.stdout.isatty())
    return EXIT_FAILURE if any(c.status == "FAIL" for c in checks) else EXIT_OK


def run_logs(args: argparse.Namespace, config: Config) -> int:
    from hermes_gateway.logs import tail

    try:
        since = tail.parse_since(args.since) if args.since else None
    except ValueError as exc:
        print(f"hermes: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    flt = tail.LogFilter(
        since=since,
        level=tail.LEVELS[args.level] if args.level else 0,
        session=args.session,
        platform=args.platform,
    )
    path = config.home_path / "logs" / "gateway.log"
    color = sys.stdout.isatty() and not args.json
    try:
        if path.exists():
            tail.show(
                tail.read_lines(path, bool(since)), flt, sys.stdout, as_json=args.json, color=color
            )
            if args.follow:
                tail.show(tail.follow(path), flt, sys.stdout, as_json=args.json, color=color)
        elif tail.journal_available():
            lines = tail.journal_lines(args.follow, args.since)
            if not tail.show(lines, flt, sys.stdout, as_json=args.json, color=color):
                print(
                    f"hermes: no log file at {path}, and no matching journal lines", file=sys.stderr
                )
                return EXIT_FAILURE
        else:
            print(f"hermes: no log file at {path} and no journald", file=sys.stderr)
            return EXIT_FAILURE
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def run_gateway(config: Config, config_path: str | None = None) -> int:
    """Run the daemon on uvloop until SIGTERM/SIGINT; return the exit code."""
    import uvloop

    from hermes_gateway.cli.preload import preload
    from hermes_gateway.lifecycle import first_start
    from hermes_gateway.logs import configure_logging
    from hermes_gateway.server import Gateway

    # what the gateway creates (home, state.db, logs, workspace) holds every user's messages:
    # private to its user, as the systemd units' UMask=0077 makes it there
    os.umask(0o077)
    first = first_start(config)  # before the log file's folder is made in the home
    try:
        sink = configure_logging(config)
    except OSError as exc:
        print(f"hermes: cannot open the log file under {config.home}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    # the event loop shares the GIL with the agent threads: a shorter switch interval (5 ms
    # by default) lets it take its turn sooner when they are busy, which is loop lag
    sys.setswitchinterval(0.001)

    async def serve() -> int:
        EARLY.defer()  # a stop from here on is kept for `Lifecycle.serve`
        return await Gateway(config, config_path=config_path, first_start=first).serve()

    code = EXIT_FAILURE
    try:
        preload(config)  # before the loop: what the start would import on it would stall it
        code = uvloop.run(serve())
    except (ConfigError, AdapterAuthError) as exc:
        print(f"hermes: configuration error: {exc}", file=sys.stderr)
        code = EXIT_CONFIG
    except (StoreError, OSError) as exc:  # OSError: e.g. the control port is taken
        print(f"hermes: {exc}", file=sys.stderr)
    finally:
        EARLY.stopped()
        sink.stop()
        gc.enable()  # a start that failed before it turned collection back on
    _exit_past_stuck_threads(code)
    return code


def _exit_past_stuck_threads(code: int) -> None:
    """An abandoned agent thread (a wedged tool or model call) would hold the interpreter's
    exit while `concurrent.futures` joins it; everything is flushed by now, so leave."""
    stuck = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stuck:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _client_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
