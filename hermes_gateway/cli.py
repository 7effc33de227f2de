"""The `hermes` command line: `gateway run`, `chat`, `config check`, `version`.

The only module that calls `sys.exit` (through `main`'s return value) and picks exit codes:
0 clean stop, 75 restart wanted, 78 configuration error (systemd must not restart).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Sequence

from hermes_gateway import __version__
from hermes_gateway.config import Config, load_config
from hermes_gateway.errors import AdapterAuthError, ConfigError, StoreError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_RESTART = 75
EXIT_CONFIG = 78


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes", description="Hermes Gateway")
    parser.add_argument("--version", action="version", version=f"hermes {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    gateway = sub.add_parser("gateway", help="run and manage the gateway daemon")
    gsub = gateway.add_subparsers(dest="action", required=True)
    run = gsub.add_parser("run", help="run the gateway in the foreground")
    run.add_argument("--config", help="config file (default: $HERMES_HOME/config.yaml)")

    chat = sub.add_parser("chat", help="chat with the running gateway from the terminal")
    chat.add_argument("--config", help="config file (to find the control port and token)")
    chat.add_argument("--session", default="terminal", help="session name (default: terminal)")
    chat.add_argument("--url", help="control API base URL (default: from the config)")
    chat.add_argument("--no-stream", action="store_true", help="wait for whole replies")

    pairing = sub.add_parser("pairing", help="approve users who asked to talk to the bot")
    pairing.add_argument("--config", help="config file (to find the control port and token)")
    pairing.add_argument("--url", help="control API base URL (default: from the config)")
    psub = pairing.add_subparsers(dest="action", required=True)
    psub.add_parser("list", help="pending codes and approved users")
    approve = psub.add_parser("approve", help="approve a pairing code")
    approve.add_argument("platform")
    approve.add_argument("code")
    revoke = psub.add_parser("revoke", help="remove an approved user")
    revoke.add_argument("platform")
    revoke.add_argument("user_id")

    config = sub.add_parser("config", help="configuration tools")
    csub = config.add_subparsers(dest="action", required=True)
    check = csub.add_parser("check", help="validate the config and exit (78 if invalid)")
    check.add_argument("--config", help="config file")

    sub.add_parser("version", help="print the version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"hermes {__version__}")
        return EXIT_OK
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"hermes: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "config":
        print(f"config OK (home: {config.home})")
        return EXIT_OK
    url = getattr(args, "url", None) or (
        f"http://{_client_host(config.control.host)}:{config.control.port}"
    )
    if args.command == "chat":
        from hermes_gateway.chat import run_chat

        return run_chat(url, config.control.token, args.session, stream=not args.no_stream)
    if args.command == "pairing":
        return run_pairing(args, url, config.control.token)
    return run_gateway(config)


def run_pairing(args: argparse.Namespace, url: str, token: str | None) -> int:
    """`hermes pairing list|approve|revoke` through the running gateway's control API."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
            if args.action == "list":
                response = client.get("/pairing")
            elif args.action == "approve":
                body = {"platform": args.platform, "code": args.code}
                response = client.post("/pairing/approve", json=body)
            else:
                body = {"platform": args.platform, "user_id": args.user_id}
                response = client.post("/pairing/revoke", json=body)
    except httpx.HTTPError as exc:
        print(f"hermes: the gateway is not answering at {url}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    data = response.json()
    if response.status_code != 200:
        print(f"hermes: {data.get('error', {}).get('message', response.text)}", file=sys.stderr)
        return EXIT_FAILURE
    if args.action == "list":
        _print_pairing(data["entries"])
    elif args.action == "approve":
        who = data["approved"]
        print(f"approved {who['platform']} user {who['user_id']} ({who['user_name']})")
    else:
        print(f"revoked {args.platform} user {args.user_id}")
    return EXIT_OK


def _print_pairing(entries: list[dict[str, object]]) -> None:
    if not entries:
        print("no pairing requests and no paired users")
        return
    print(f"{'PLATFORM':<10} {'STATUS':<9} {'CODE':<9} {'USER ID':<20} NAME")
    for e in entries:
        print(
            f"{e['platform']!s:<10} {e['status']!s:<9} {e['code']!s:<9} {e['user_id']!s:<20} "
            f"{e['user_name']}"
        )


def run_gateway(config: Config) -> int:
    """Run the daemon on uvloop until SIGTERM/SIGINT; return the exit code."""
    import uvloop

    from hermes_gateway.logs import configure_logging
    from hermes_gateway.server import Gateway

    try:
        sink = configure_logging(config)
    except OSError as exc:
        print(f"hermes: cannot open the log file under {config.home}: {exc}", file=sys.stderr)
        return EXIT_FAILURE

    async def serve() -> int:
        return await Gateway(config).serve()

    code = EXIT_FAILURE
    try:
        code = uvloop.run(serve())
    except (ConfigError, AdapterAuthError) as exc:
        print(f"hermes: configuration error: {exc}", file=sys.stderr)
        code = EXIT_CONFIG
    except (StoreError, OSError) as exc:  # OSError: e.g. the control port is taken
        print(f"hermes: {exc}", file=sys.stderr)
    finally:
        sink.stop()
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
