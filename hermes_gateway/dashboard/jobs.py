"""The hook a scheduler fills to get a Jobs page: hidden while `Dashboard.jobs` is None.

The dashboard knows nothing of jobs but this protocol; whatever builds the scheduler gives
the dashboard an object that has these two methods (its constructor's ``jobs``).
"""

from __future__ import annotations

from typing import Any, Protocol

ACTIONS = ("run", "pause", "resume")


class JobsSource(Protocol):
    async def snapshot(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per job; the page shows its keys as columns (``id`` is the
        job's handle for actions; ``name``, ``next_run``, ``status``, ``last_output`` ...)."""
        ...

    async def act(self, job_id: str, action: str) -> dict[str, Any]:
        """Carry out one of `ACTIONS` on a job; raise `RequestError` when it cannot."""
        ...
