"""`hermes doctor` sees a scheduler that is not ticking: jobs overdue long past their slot."""

from __future__ import annotations

import time
from pathlib import Path

from hermes_gateway.scheduler.health import scheduler_check
from hermes_gateway.scheduler.jobs import Origin, new_job
from hermes_gateway.scheduler.ledger import Ledger
from hermes_gateway.scheduler.schedule import parse
from hermes_gateway.store.store import Store
from tests.harness import make_config


async def test_overdue_jobs_show_in_the_doctor(tmp_path: Path) -> None:
    config = make_config(tmp_path, None, scheduler={"enabled": True})
    (tmp_path / "off").mkdir()
    off = make_config(tmp_path / "off", None)
    assert (await scheduler_check(off))[0] == "skip"
    store = Store(config.store_url)
    await store.open()
    try:
        ledger = Ledger(store, "t", 60)
        origin = Origin("telegram", "dm", "555", None, "555")
        created = time.time() - 3600
        job = new_job(
            name="n",
            prompt="p",
            schedule=parse("every 30m", "UTC", created),
            origin=origin,
            now=created,
        )
        await ledger.add(job, created)
        status, detail = await scheduler_check(config)
        assert status == "warn" and "1 of 1 active job(s) overdue" in detail
        await ledger.change(job.id, time.time(), next_run_at=int(time.time()) + 60)
        assert await scheduler_check(config) == ("ok", "1 active job(s), none overdue")
    finally:
        await store.close()
