"""`hermes memory forget --user PLATFORM:USER (--all | ID...)`: a person's archive memories
removed on request, through the running gateway's control API (an operator route), or in the
store itself when nothing listens there."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from hermes_gateway.errors import StoreError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def add_parser(msub: Any, with_config: Any) -> None:
    forget = with_config(msub.add_parser("forget", help="delete a user's archive memories"))
    forget.add_argument("--url", help="control API base URL (default: from the config)")
    forget.add_argument("--user", required=True, help="PLATFORM:USER, e.g. telegram:123456789")
    what = forget.add_mutually_exclusive_group(required=True)
    what.add_argument("--all", action="store_true", help="every memory of that user")
    what.add_argument("ids", nargs="*", default=[], help="memory ids (12 or m12)")


def run_forget(
    args: argparse.Namespace, url: str, token: str | None, store_url: str, scope: str
) -> int:
    # imported here: every command builds its parser from this module, `gateway run` too
    import httpx

    from hermes_gateway.cli.control_client import refused, unreachable
    from hermes_gateway.memory.scope import user_bank

    try:
        bank = user_bank(args.user)
        ids = None if args.all else [_memory_id(i) for i in args.ids]
    except ValueError as exc:
        print(f"hermes: {exc}", file=sys.stderr)
        return EXIT_USAGE
    body: dict[str, Any] = {"user": args.user, **({"all": True} if ids is None else {"ids": ids})}
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            response = client.post("/memory/forget", json=body)
    except httpx.ConnectError:  # not running: the store is ours alone
        return asyncio.run(_offline(bank, ids, store_url, scope))
    except httpx.HTTPError as exc:
        return unreachable(url, exc)
    data = response.json()
    if response.status_code != 200:
        return refused(response, data)
    _report(bank, data["forgotten"], data["missing"], data["scope"], "")
    return EXIT_OK


async def _offline(bank: str, ids: list[int] | None, store_url: str, scope: str) -> int:
    from hermes_gateway.memory.archive import forget_rows  # only here: numpy, the store
    from hermes_gateway.store.store import Store

    store = Store(store_url)
    try:
        await store.open()
        gone = await forget_rows(store, bank, ids)
    except StoreError as exc:
        print(f"hermes: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await store.close()
    missing = [i for i in ids if i not in set(gone)] if ids is not None else []
    _report(bank, gone, missing, scope, " (the gateway is not running)")
    return EXIT_OK


def _report(bank: str, gone: list[int], missing: list[int], scope: str, where: str) -> None:
    listed = ", ".join(f"m{i}" for i in gone[:50]) + (" ..." if len(gone) > 50 else "")
    count = f"{len(gone)} memor{'y' if len(gone) == 1 else 'ies'}"
    print(f"forgot {count} of {bank}{where}" + (f": {listed}" if gone else ""))
    if missing:
        print("not in that user's archive: " + ", ".join(f"m{i}" for i in missing))
    if scope != "user":
        print(
            "note: memory.scope is shared, so memories kept since then are in the shared bank, "
            "not the user's; only those kept while memory was per user are removed here"
        )


def _memory_id(given: str) -> int:
    digits = given[1:] if given[:1] in "mM" else given
    if not digits.isdigit() or int(digits) <= 0:
        raise ValueError(f"a memory id is a number like 12 or m12 (not {given!r})")
    return int(digits)
