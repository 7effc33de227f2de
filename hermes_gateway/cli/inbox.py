"""`hermes inbox list|retry|drop`: quarantined messages, through the running gateway's control
API, or in the store itself when nothing listens there (a retry then waits for the next start).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import httpx

from hermes_gateway.cli.control_client import refused, unreachable
from hermes_gateway.errors import StoreError

EXIT_OK = 0
EXIT_FAILURE = 1


def run_inbox(args: argparse.Namespace, url: str, token: str | None, store_url: str) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
            if args.action == "list":
                response = client.get("/inbox")
            else:
                response = client.post(f"/inbox/{args.inbox_id}/{args.action}")
    except httpx.ConnectError:  # not running: the store is ours alone
        return asyncio.run(_offline(args, store_url))
    except httpx.HTTPError as exc:
        return unreachable(url, exc)
    data = response.json()
    if response.status_code != 200:
        return refused(response, data)
    if args.action == "list":
        print_quarantined(data["quarantined"], sys.stdout.write)
    elif args.action == "retry":
        print(f"released inbox entry {args.inbox_id}: the gateway is processing it now")
    else:
        print(f"dropped inbox entry {args.inbox_id}")
    return EXIT_OK


async def _offline(args: argparse.Namespace, store_url: str) -> int:
    from hermes_gateway.store.store import Store  # only here: `gateway status` stays light

    store = Store(store_url)
    try:
        await store.open()
        if args.action == "list":
            print_quarantined([q.summary() for q in await store.quarantined()], sys.stdout.write)
            return EXIT_OK
        if args.action == "retry":
            done = await store.release(args.inbox_id) is not None
            what = "released; the gateway processes it at its next start"
        else:
            done = await store.discard(args.inbox_id)
            what = "dropped"
    except StoreError as exc:
        print(f"hermes: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await store.close()
    if not done:
        print(f"hermes: inbox entry {args.inbox_id} is not quarantined", file=sys.stderr)
        return EXIT_FAILURE
    print(f"inbox entry {args.inbox_id} {what} (the gateway is not running)")
    return EXIT_OK


def print_quarantined(entries: list[dict[str, Any]], write: Any) -> None:
    """The table `hermes inbox list` and `hermes gateway status` show."""
    if not entries:
        write("no quarantined messages\n")
        return
    write(f"{'ID':>6}  {'TRIES':>5}  {'AGE':>6}  {'SESSION':<28} TEXT\n")
    for e in entries:
        age = _age(time.time() - float(e["accepted_at"]))
        write(f"{e['id']:>6}  {e['attempts']:>5}  {age:>6}  {e['session_key']!s:<28} {e['text']}\n")


def _age(seconds: float) -> str:
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 172800:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"
