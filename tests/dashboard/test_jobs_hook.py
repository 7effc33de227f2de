"""The Jobs page is a hook: hidden without a scheduler, shown (with its actions) once one sets
`Dashboard.jobs`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_gateway.errors import RequestError
from tests.fakes.openai import FakeOpenAI
from tests.harness import make_config, running_gateway


class Jobs:
    def __init__(self) -> None:
        self.done: list[tuple[str, str]] = []

    async def snapshot(self) -> list[dict[str, Any]]:
        return [{"id": "j1", "name": "<b>nightly</b>", "next_run": "03:00", "status": "ok"}]

    async def act(self, job_id: str, action: str) -> dict[str, Any]:
        if job_id != "j1":
            raise RequestError(404, "no such job", "not_found")
        self.done.append((job_id, action))
        return {"job": job_id, "action": action}


async def test_jobs_appear_only_with_a_scheduler(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        await client.dashboard_login()  # the dashboard wants the control token
        base = f"{client.base}/dashboard"
        async with client.http.get(f"{base}/") as resp:
            assert "/dashboard/jobs" not in await resp.text()
        async with client.http.get(f"{base}/jobs") as resp:
            assert resp.status == 404
        async with client.http.get(f"{base}/events/jobs") as resp:
            assert resp.status == 404

        jobs = Jobs()
        assert gw.dashboard is not None
        gw.dashboard.jobs = jobs
        async with client.http.get(f"{base}/") as resp:
            assert '<a href="/dashboard/jobs">Jobs</a>' in await resp.text()
        async with client.http.get(f"{base}/jobs") as resp:
            assert resp.status == 200
        seen: dict[str, Any] = {}
        async with client.http.get(f"{base}/events/jobs") as resp:
            name = ""
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    seen[name] = json.loads(line[6:])
                    if "jobs" in seen:
                        break
        assert seen["jobs"]["jobs"][0]["name"] == "<b>nightly</b>"
        headers = {"X-CSRF-Token": seen["hello"]["csrf"]}
        async with client.http.post(f"{base}/api/jobs/j1/pause", headers=headers) as resp:
            assert resp.status == 200 and await resp.json() == {"job": "j1", "action": "pause"}
        async with client.http.post(f"{base}/api/jobs/j1/explode", headers=headers) as resp:
            assert resp.status == 404
        async with client.http.post(f"{base}/api/jobs/j9/run", headers=headers) as resp:
            assert resp.status == 404
        assert jobs.done == [("j1", "pause")]
