"""The schema's revisions on PostgreSQL: a database made by each older release, or at each
earlier revision, reaches the head; concurrent openers of one fresh database do not race (an
advisory lock); `hermes db current|upgrade` on a PostgreSQL URL."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hermes_gateway.store.migrate import head
from tests.hermes_gateway.store.test_store_migration import (
    UNVERSIONED,
    check_concurrent_opens,
    check_newer_release_refused,
    check_release_upgrade,
    check_revision_upgrade,
)
from tests.integration.test_postgres import SERVER
from tests.integration.test_postgres import pg_url as pg_url  # fixture
from tests.store_schemas import RELEASES, make_release, on

pytestmark = pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)")


@pytest.mark.parametrize("release", range(len(RELEASES)), ids=RELEASES)
async def test_a_database_of_each_older_release_reaches_the_head(pg_url: str, release: int) -> None:
    await check_release_upgrade(pg_url, release)


@pytest.mark.parametrize("rev", ["r01", "r02", "r03", "r04", "r05", "r06", "r07", "r08", "r09"])
async def test_a_database_at_each_earlier_revision_reaches_the_head(pg_url: str, rev: str) -> None:
    await check_revision_upgrade(pg_url, rev)


async def test_concurrent_opens_of_one_fresh_database_do_not_race(pg_url: str) -> None:
    await check_concurrent_opens(pg_url)


async def test_a_database_from_a_newer_release_is_refused(pg_url: str) -> None:
    await check_newer_release_refused(pg_url)


async def test_hermes_db_on_postgresql(pg_url: str, tmp_path: Path) -> None:
    await on(pg_url, make_release, RELEASES.index("resume"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"store": {"url": pg_url}}))

    def hermes_db(action: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "hermes_gateway", "db", action],
            env={**os.environ, "HERMES_HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert f"revision: {UNVERSIONED}\n" in await asyncio.to_thread(hermes_db, "current")
    upgraded = await asyncio.to_thread(hermes_db, "upgrade")
    assert f"upgraded from {UNVERSIONED} to {head()}" in upgraded
    assert f"revision: {head()}\nhead:     {head()}\n" in await asyncio.to_thread(
        hermes_db, "current"
    )
