"""`hermes doctor`'s look at the scheduler, from the store: jobs overdue well past their slot
mean no ticker is running (the gateway is down, or its scheduler is off or stalled), and live
runs whose lease lapsed mean a process died under them."""

from __future__ import annotations

import time

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from hermes_gateway.config import Config
from hermes_gateway.scheduler.jobs import LIVE
from hermes_gateway.store.models import CronJobRow, CronRunRow
from hermes_gateway.store.store import Store

OVERDUE_S = 900.0


async def scheduler_check(config: Config) -> tuple[str, str]:
    """(status, detail) for the doctor: ok, warn or skip."""
    if not config.scheduler.enabled:
        return "skip", "off (scheduler.enabled)"
    now = time.time()
    store = Store(config.store_url)
    await store.open()
    try:

        async def look(db: AsyncSession) -> tuple[int, int, int]:
            jobs = await db.scalar(select(func.count()).where(CronJobRow.state == "active"))
            overdue = await db.scalar(
                select(func.count()).where(
                    CronJobRow.state == "active", CronJobRow.next_run_at < now - OVERDUE_S
                )
            )
            stale = await db.scalar(
                select(func.count()).where(
                    CronRunRow.status.in_(LIVE), CronRunRow.lease_until < now
                )
            )
            return int(jobs or 0), int(overdue or 0), int(stale or 0)

        jobs, overdue, stale = await store.read(look)
    finally:
        await store.close()
    if overdue:
        return "warn", (
            f"{overdue} of {jobs} active job(s) overdue by over {OVERDUE_S / 60:.0f} min: no "
            "ticker is running (gateway down?) or it is stalled (see /readyz)"
        )
    if stale:
        return "warn", f"{stale} run(s) still marked live with an expired lease (reaped at start)"
    return "ok", f"{jobs} active job(s), none overdue"
