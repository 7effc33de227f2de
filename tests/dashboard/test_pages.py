"""What the pages carry: a user's markup shows as text, no page runs inline script (the CSP
forbids it), no secret reaches a page or a stream, and the streams say what the gateway does."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import aiohttp

from hermes_gateway.dashboard import app as dashboard_app
from tests.fakes.openai import FakeOpenAI, hang
from tests.harness import eventually, make_config, running_gateway

STATIC = Path(dashboard_app.__file__).parent / "static"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
PAGES = ["/", "/sessions", "/inbox", "/logs", "/pairing", "/chat", "/session?key=api:dm:mallory"]


async def _first_events(
    http: aiohttp.ClientSession, url: str, n: int, headers: dict[str, str] | None = None
) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    name = ""
    async with http.get(url, headers=headers) as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
                if len(events) >= n:
                    break
    return events


async def test_markup_a_user_wrote_renders_as_text(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    config = make_config(tmp_path, fake_llm.base_url, control={"token": "t0ken-0123456789abcdef"})
    async with running_gateway(config) as (gw, client):
        client.http.headers["Authorization"] = "Bearer t0ken-0123456789abcdef"
        answer = await client.chat(HOSTILE, user="mallory")
        assert answer["status"] == 200
        auth = gw.dashboard.auth
        cookie = auth.login("t0ken-0123456789abcdef")
        base = f"http://127.0.0.1:{gw.control.port}/dashboard"
        headers = {"Cookie": f"hermes_dashboard={cookie}"}
        secrets = ["t0ken-0123456789abcdef", "sk-fake"]
        for path in PAGES:
            async with client.http.get(base + path, headers=headers) as resp:
                assert resp.status == 200, path
                html = await resp.text()
                csp = resp.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "unsafe-inline" not in csp
            assert "<script>" not in html and not re.search(r"<script(?![^>]*\ssrc=)", html)
            assert not re.search(r"<[a-z][^<>]*\son\w+=", html), path  # nor inline handlers
            assert not any(s in html for s in secrets), path
        async with client.http.get(f"{base}/session?key=api:dm:mallory", headers=headers) as resp:
            html = await resp.text()
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=" in html
        for topic in ("overview", "sessions", "pairing", "inbox"):
            events = await _first_events(client.http, f"{base}/events/{topic}", 2, headers)
            assert not any(s in json.dumps(events) for s in secrets), topic


def test_the_scripts_never_write_html() -> None:
    """User text reaches the DOM through textContent only (uPlot is vendored, not ours)."""
    ours = [p for p in STATIC.glob("*.js") if not p.name.startswith("uPlot")]
    assert len(ours) >= 7
    for path in ours:
        code = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in code, f"{path.name} uses {sink}"


async def test_the_sessions_stream_shows_a_run_and_stop_ends_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(hang(30))
    config = make_config(tmp_path, fake_llm.base_url)
    async with running_gateway(config) as (gw, client):
        await client.dashboard_login()  # the dashboard wants the control token
        asked = asyncio.create_task(client.chat("think hard", user="bob"))
        await eventually(lambda: gw.runner.busy("api:dm:bob"))
        base = f"http://127.0.0.1:{gw.control.port}/dashboard"
        events = await _first_events(client.http, f"{base}/events/sessions", 2)
        hello, sessions = events[0][1], events[1][1]
        [row] = sessions["sessions"]
        assert row["key"] == "api:dm:bob" and row["state"] == "running"
        assert row["platform"] == "api" and row["user_id"] == "bob"
        assert row["text"] == "think hard" and row["policy"] == "interrupt"
        headers = {"X-CSRF-Token": hello["csrf"]}
        body = {"key": "api:dm:bob"}
        async with client.http.post(
            f"{base}/api/sessions/stop", json=body, headers=headers
        ) as resp:
            assert resp.status == 200
        answer = await asyncio.wait_for(asked, 10)
        assert answer["text"] == "Stopped."  # the user is told, as with /stop
        assert not gw.runner.busy("api:dm:bob")


def _log_readers() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "hermes-dash-logs")


async def test_a_stream_works_only_while_its_page_is_open(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """No page, no reader: the Logs tail's thread starts with the page and ends with it."""
    async with running_gateway(make_config(tmp_path, fake_llm.base_url)) as (gw, client):
        await client.dashboard_login()  # the dashboard wants the control token
        base = f"http://127.0.0.1:{gw.control.port}/dashboard"
        assert _log_readers() == 0 and gw.dashboard.streams.open == 0
        async with client.http.get(f"{base}/events/logs") as resp:
            async for raw in resp.content:
                if raw.startswith(b"event: logs"):
                    break
            assert _log_readers() == 1 and gw.dashboard.streams.open == 1
        await eventually(lambda: _log_readers() == 0 and gw.dashboard.streams.open == 0, 10)
