"""The daemon imports nothing heavy on its event loop: the store's driver and dialect, redis-py,
the dashboard's templates, the model SDK are imported before the loop starts or in a thread.
An import on the loop stalls it (measured: 0.5 s at a start on PostgreSQL and Redis), and with
it every lease renewal. A child process records each module first imported on a thread that
runs an event loop (tests/e2e/import_audit/sitecustomize.py). The dashboard's Jinja2 waits for its
first page: a gateway nobody looks at never holds it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from hermes_gateway.dashboard.auth import COOKIE
from tests.chaos.cluster import POSTGRES, postgres_database
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.redis_server import SERVER as REDIS

AUDIT = Path(__file__).parent / "import_audit"
ROOT = Path(__file__).parents[2]
HEAVY = (
    "asyncpg",
    "aiosqlite",
    "sqlalchemy.dialects",
    "redis",
    "hiredis",
    "jinja2",
    "openai",
    "httpx",
    "httpcore",
    "alembic",
    "numpy",
    "telegram",
    "discord",
    "slack_sdk",
    "slack_bolt",
    "hermes_gateway.cluster",  # cluster mode's parts, imported where the config asks for them
)
# What only a feature the default config leaves off needs (the cluster, the memory archive and
# its vectors, the scheduler, PostgreSQL, migrations, the other platforms' SDKs, web extraction,
# and the dashboard's templates until a page is asked for): a default start must not hold it.
OPTIONAL = (
    "redis",
    "numpy",
    "jinja2",
    "markupsafe",
    "telegram",
    "discord",
    "slack_sdk",
    "slack_bolt",
    "asyncpg",
    "sqlalchemy.dialects.postgresql",
    "alembic",
    "croniter",
    "trafilatura",
    "lxml",
    "playwright",
    "mcp",
    "opentelemetry",
    "hermes_gateway.traces.otel",
    "hermes_gateway.scheduler",
    "hermes_gateway.memory.archive",
    "hermes_gateway.memory.service",
    "hermes_gateway.memory.embeddings",
    # the webhook platform's adapter and what it sends with (its spec is loaded with the config)
    *(f"adapters.webhook.{name}" for name in ("adapter", "callback", "signing", "probe")),
    *(
        f"hermes_gateway.cluster.{name}"
        for name in ("on_redis", "build", "local", "ownership", "carry", "keeping", "peers")
    ),
)


@contextlib.contextmanager
def store_url() -> Iterator[dict[str, Any]]:
    """PostgreSQL where CI provides it (the driver that stalled the loop), else SQLite."""
    if not POSTGRES:
        yield {}
        return
    with postgres_database() as url:
        yield {"store": {"url": url}}


def _dashboard_page(gateway: GatewayProcess) -> httpx.Response:
    """The Overview, as an operator opens it: through the one-time link `hermes dashboard`
    gets with the control token (its first request loads the templates)."""
    link = httpx.post(f"{gateway.url}/dashboard-link", headers=gateway.operator, timeout=30)
    opened = httpx.get(gateway.url + link.json()["path"], timeout=30)
    cookie = {"Cookie": f"{COOKIE}={opened.cookies[COOKIE]}"}
    return httpx.get(f"{gateway.url}/dashboard/", headers=cookie, timeout=30)


def test_the_start_and_a_first_message_import_nothing_heavy_on_the_loop(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    audit = tmp_path / "on-the-loop.txt"
    env = {
        "PYTHONPATH": os.pathsep.join([str(AUDIT), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HERMES_IMPORT_AUDIT": str(audit),
    }
    config: dict[str, Any] = {
        "model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0},
        "dashboard": {"enabled": True},
    }
    if REDIS:
        config["cluster"] = {"redis_url": REDIS, "lease_s": 3}
    with store_url() as store:
        gateway = GatewayProcess(tmp_path / "home", {**config, **store}, env)
        try:
            gateway.start(wait=False)
            gateway.wait_healthy(timeout=60)  # a loaded machine migrating PostgreSQL is slow
            deadline = time.monotonic() + 60
            while not any(e.get("event") == "gateway.ready" for e in gateway.log_events()):
                assert time.monotonic() < deadline, gateway.stderr()
                time.sleep(0.05)
            answer = gateway.chat("hello").json()["choices"][0]["message"]["content"]
            time.sleep(1.0)  # the warm-up (the model SDK's import) is done by now
            assert gateway.proc is not None
            maps = Path(f"/proc/{gateway.proc.pid}/maps")
            before = "markupsafe" in maps.read_text()  # Jinja2's compiled half, once imported
            page = _dashboard_page(gateway)
            after = "markupsafe" in maps.read_text()
            gateway.signal(signal.SIGTERM)
            assert gateway.wait(30) == 0
        finally:
            gateway.kill()
    assert answer == "echo: hello"
    assert not before, "the dashboard's templates were loaded before anyone asked for a page"
    assert page.status_code == 200 and "<html" in page.text, page.text[:500]
    assert after
    names = audit.read_text().split() if audit.exists() else []
    heavy = [n for n in names if n.startswith(HEAVY)]
    assert heavy == [], f"imported on the event loop: {heavy}"


def test_the_audit_sees_an_import_on_the_loop(tmp_path: Path) -> None:
    """The recorder itself works: a module imported inside a running loop is written."""
    audit = tmp_path / "on-the-loop.txt"
    code = "import asyncio\nasync def main():\n    import colorsys\nasyncio.run(main())\n"
    env = {**os.environ, "PYTHONPATH": str(AUDIT), "HERMES_IMPORT_AUDIT": str(audit)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert "colorsys" in audit.read_text().split()


def test_a_default_start_and_first_message_import_no_optional_feature(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The default config (the local API on SQLite, the dashboard on, nothing else): what the
    process imports through its start, a first answer and its stop holds none of `OPTIONAL`."""
    imported = tmp_path / "imported.txt"
    env = {
        "PYTHONPATH": os.pathsep.join([str(AUDIT), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HERMES_IMPORT_ALL": str(imported),
    }
    config = {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}}
    gateway = GatewayProcess(tmp_path / "home", config, env)
    try:
        gateway.start(wait=False)
        gateway.wait_healthy(timeout=60)
        answer = gateway.chat("hello").json()["choices"][0]["message"]["content"]
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(30) == 0
    finally:
        gateway.kill()
    assert answer == "echo: hello"
    names = set(imported.read_text().split())
    assert "hermes_gateway.server" in names  # the recorder saw the start
    held = sorted(n for n in names if any(n == m or n.startswith(m + ".") for m in OPTIONAL))
    assert held == [], f"a default start imported: {held}"


def test_an_idle_gateway_holds_no_model_sdk_until_the_first_message(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The model SDK (about 25 MB) is imported when the first message comes, not at the start:
    ready and idle for a while, the process has not imported it; answered once, it has."""
    imported = tmp_path / "imported.txt"
    env = {
        "PYTHONPATH": os.pathsep.join([str(AUDIT), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HERMES_IMPORT_ALL": str(imported),
    }
    config = {"model": {"base_url": fake_llm.base_url, "api_key": "sk-fake", "max_retries": 0}}
    gateway = GatewayProcess(tmp_path / "home", config, env)
    try:
        gateway.start(wait=False)
        gateway.wait_healthy(timeout=60)
        deadline = time.monotonic() + 60
        while not any(e.get("event") == "gateway.ready" for e in gateway.log_events()):
            assert time.monotonic() < deadline, gateway.stderr()
            time.sleep(0.05)
        time.sleep(2.0)  # what a warm-up at the start would have imported by now
        idle = set(imported.read_text().split())
        answer = gateway.chat("hello").json()["choices"][0]["message"]["content"]
        answered = set(imported.read_text().split())
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(30) == 0
    finally:
        gateway.kill()
    assert answer == "echo: hello"
    assert "hermes_gateway.server" in idle  # the recorder saw the start
    assert "openai" not in idle, "the model SDK was imported before any message"
    assert "openai" in answered
