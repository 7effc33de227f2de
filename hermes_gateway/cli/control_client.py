"""The CLI side of the control API's operator routes: `hermes pairing list|approve|revoke`,
and how any operator command reports a gateway that is down or says no."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import httpx

EXIT_OK = 0
EXIT_FAILURE = 1


def run_pairing(args: argparse.Namespace, url: str, token: str | None) -> int:
    """`hermes pairing list|approve|revoke` through the running gateway's control API."""

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
        return unreachable(url, exc)
    data = response.json()
    if response.status_code != 200:
        return refused(response, data)
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


def unreachable(url: str, exc: Exception) -> int:
    print(f"hermes: the gateway is not answering at {url}: {exc}", file=sys.stderr)
    return EXIT_FAILURE


def refused(response: httpx.Response, data: dict[str, Any]) -> int:
    """An operator route said no: its OpenAI-style error message, on stderr."""
    print(f"hermes: {data.get('error', {}).get('message', response.text)}", file=sys.stderr)
    if response.status_code == 401:  # most likely run as a user who cannot read the file
        print(f"hermes: {TOKEN_HINT}", file=sys.stderr)
    return EXIT_FAILURE


TOKEN_HINT = (
    "operator commands send control.token from the config, else the token the gateway "
    "keeps in control.token in its home (readable only by the gateway's user)"
)
