"""`hermes db current|upgrade`: the store's schema revision, and bringing it to this release's.
A gateway upgrades its database when it opens it; operators running several instances on one
PostgreSQL upgrade once, before starting the new release anywhere."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from hermes_gateway.errors import StoreError
from hermes_gateway.store import migrate as store_migrate
from hermes_gateway.store.engine import StoreEngine, engine_options, safe_url

EXIT_OK = 0
EXIT_FAILURE = 1


def run_db(action: str, store_url: str) -> int:
    path = _sqlite_file(store_url)
    if path is not None and action == "current" and not path.exists():
        print(f"store:    {safe_url(store_url)}")
        print("revision: none (no database file yet: the first start makes it)")
        print(f"head:     {store_migrate.head()}")
        return EXIT_OK
    try:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        return asyncio.run(_current(store_url) if action == "current" else _upgrade(store_url))
    except (StoreError, SQLAlchemyError, OSError) as exc:
        print(f"hermes: store {safe_url(store_url)}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _sqlite_file(url: str) -> Path | None:
    if not url.startswith("sqlite") or store_migrate.in_memory(url):
        return None
    return Path(url.split("///", 1)[-1].split("?", 1)[0])


async def _current(url: str) -> int:
    options = engine_options(url, StoreEngine.lock_wait_s)
    found = await store_migrate.run(url, options, store_migrate.current)
    print(f"store:    {safe_url(url)}")
    print(f"revision: {found.describe()}")
    print(f"head:     {found.head}")
    if found.current != found.head:
        print("run `hermes db upgrade` (or start the gateway) to bring it to the head")
    return EXIT_OK


async def _upgrade(url: str) -> int:
    options = engine_options(url, StoreEngine.lock_wait_s)
    before, after = await store_migrate.run(url, options, store_migrate.upgrade)
    if before == after:
        print(f"{safe_url(url)}: already at {after.describe()}, nothing to do")
    else:
        print(f"{safe_url(url)}: upgraded from {before.describe()} to {after.describe()}")
    return EXIT_OK
