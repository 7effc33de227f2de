"""`hermes doctor`: check what the gateway needs, in plain words, with real calls.

Config, home permissions, the store, the control port, the model endpoint (`/models`), the
traces' collector (when traces are on), the archive's embeddings endpoint (when in use), the
walls around tool processes and how a script's memory is bounded, the browser tools' Chromium
(when enabled), and each enabled platform, by its spec's probe (a token check: getMe,
users/@me, auth.test). Exit 1 when anything failed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TextIO

import httpx

from agent_core.completion import ModelError
from hermes_gateway.config import Config
from hermes_gateway.control.token import token_path
from hermes_gateway.errors import StoreError
from hermes_gateway.platform_spec import PlatformSpec, ProbeFailed, load_ref, platform_specs
from hermes_gateway.store.engine import safe_url
from hermes_gateway.store.store import Store
from tools import memory_group

Status = Literal["ok", "warn", "FAIL", "skip"]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str


class Doctor:
    def __init__(self, config: Config, *, timeout: float = 10.0) -> None:
        self.config = config
        self.http = httpx.Client(timeout=timeout)

    def run(self) -> list[Check]:
        checks: list[Callable[[], Check]] = [
            self.home,
            self.store,
            self.scheduler,
            self.port,
            self.model,
            self.traces,
            self.embeddings,
            self.walls,
            self.tool_memory,
            self.mcp,
            self.browser,
            *(self._platform(spec) for spec in platform_specs() if spec.probe),
        ]
        try:
            return [self._safely(check) for check in checks]
        finally:
            self.http.close()

    def _safely(self, check: Callable[[], Check]) -> Check:
        try:
            return check()
        except Exception as exc:  # a check that crashes is a failed check, not a traceback
            return Check(check.__name__, "FAIL", f"{type(exc).__name__}: {exc}")

    def home(self) -> Check:
        home = self.config.home_path
        if not home.exists():
            return Check("home", "warn", f"{home} does not exist yet (created at first start)")
        if not os.access(home, os.W_OK):
            return Check("home", "FAIL", f"{home} is not writable by this user")
        loose = [
            p.name
            for p in (home, home / "gateway.env", home / "state.db", token_path(home))
            if p.exists() and p.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO)
        ]
        if loose:
            return Check("home", "warn", f"readable by others: {', '.join(loose)} (chmod go-rwx)")
        return Check("home", "ok", str(home))

    def store(self) -> Check:
        if self.config.store.url is None and not (self.config.home_path / "state.db").exists():
            # a check must not create what it checks: the first start makes the database
            return Check("store", "warn", "no database yet (created at first start)")

        async def probe() -> None:
            store = Store(self.config.store_url)
            await store.open()
            await store.close()

        try:
            asyncio.run(probe())
        except StoreError as exc:
            return Check("store", "FAIL", str(exc))
        return Check("store", "ok", safe_url(self.config.store_url))

    def scheduler(self) -> Check:
        if self.config.scheduler.enabled and self.store().status != "ok":
            return Check("scheduler", "skip", "the store is not usable")
        from hermes_gateway.scheduler.health import scheduler_check

        status, detail = asyncio.run(scheduler_check(self.config))
        return Check("scheduler", status, detail)  # type: ignore[arg-type]

    def port(self) -> Check:
        host, port = self.config.control.host, self.config.control.port
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
                return Check("control port", "ok", f"{host}:{port} is free")
            except OSError:
                pass
        try:
            url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}/healthz"
            if self.http.get(url, timeout=3).status_code == 200:
                return Check("control port", "ok", f"{host}:{port} is served by a running gateway")
        except httpx.HTTPError:
            pass
        return Check("control port", "FAIL", f"{host}:{port} is taken by another program")

    def model(self) -> Check:
        m = self.config.model
        headers = {"Authorization": f"Bearer {m.api_key}"} if m.api_key else {}
        try:
            r = self.http.get(f"{m.base_url.rstrip('/')}/models", headers=headers)
        except httpx.HTTPError as exc:
            return Check("model", "FAIL", f"{m.base_url} unreachable: {exc}")
        if r.status_code in (401, 403):
            return Check(
                "model", "FAIL", f"the provider rejected the API key (HTTP {r.status_code})"
            )
        if r.status_code != 200:
            return Check("model", "warn", f"/models answered HTTP {r.status_code}")
        names = {item.get("id") for item in r.json().get("data", []) if isinstance(item, dict)}
        if names and m.name not in names:
            return Check("model", "warn", f"{m.name!r} is not in the provider's model list")
        return Check("model", "ok", f"{m.name} at {m.base_url}")

    def traces(self) -> Check:
        """The OTLP collector, when traces are on: an empty export (an empty
        ExportTraceServiceRequest is zero bytes of protobuf). Any HTTP answer says it is
        reachable; the detail never shows the headers, which are secrets."""
        t = self.config.observability.traces
        if not t.enabled:
            return Check("traces", "skip", "traces are off")
        headers = {**t.headers, "Content-Type": "application/x-protobuf"}
        try:
            r = self.http.post(t.endpoint, content=b"", headers=headers)
        except httpx.HTTPError as exc:
            return Check("traces", "FAIL", f"{t.endpoint} unreachable: {type(exc).__name__}")
        if r.status_code in (401, 403):
            detail = f"{t.endpoint} refused the configured headers (HTTP {r.status_code})"
            return Check("traces", "warn", detail)
        if r.status_code >= 500:
            return Check("traces", "warn", f"{t.endpoint} answered HTTP {r.status_code}")
        return Check("traces", "ok", f"{t.endpoint} reachable (HTTP {r.status_code})")

    def embeddings(self) -> Check:
        """The archive's embeddings endpoint, with one real call, when the archive is in use
        (a `hindsight_*` tool enabled, or `memory.auto_retain`): without it recall only
        matches words."""
        from hermes_gateway.memory.embeddings import Embedder
        from hermes_gateway.memory.wiring import archive_wanted, embedding_settings

        if not archive_wanted(self.config):
            return Check("embeddings", "skip", "no hindsight_* tool enabled")
        settings = embedding_settings(self.config)
        if settings is None:
            return Check(
                "embeddings",
                "warn",
                "no API key for the endpoint (memory.embeddings.api_key): recall matches words",
            )
        embedder = Embedder(dataclasses.replace(settings, max_retries=0))
        try:
            [vector] = embedder.embed(["hermes doctor"])
        except ModelError as exc:
            return Check("embeddings", "FAIL", f"{exc} Recall matches words only until it works.")
        finally:
            embedder.close()
        dims = len(vector) // 4  # float32
        return Check("embeddings", "ok", f"{settings.model} at {settings.base_url} ({dims} dims)")

    def walls(self) -> Check:
        """What the kernel lets the gateway build around tool processes (probed as at start)."""
        from tools import sandbox

        network = self.config.tools.terminal.network
        walls = sandbox.walls(network)
        detail = f"{sandbox.current_mode()} mode; {sandbox.describe(walls, network)}"
        complete = walls.writes and walls.hidden and (walls.network or network == "host")
        return Check("tool walls", "ok" if complete else "warn", detail)

    def tool_memory(self) -> Check:
        """Which bound holds `execute_code`'s memory, for a process started like this one (a
        gateway under systemd may get a cgroup a doctor run from a shell does not)."""
        detail = memory_group.describe()
        t = self.config.tools
        used = "execute_code" in t.enabled or any("execute_code" in v for v in t.platforms.values())
        weak = memory_group.support().kind == "watcher" and used
        return Check("tool memory", "warn" if weak else "ok", detail)

    def mcp(self) -> Check:
        """Each enabled MCP server started as the gateway starts it, and listed."""
        names = list(self.config.mcp.active())
        if not names:
            return Check("mcp", "skip", "no MCP server is configured")
        from hermes_gateway.cli.mcp import probe

        found = probe(self.config, None, names)
        bad = [
            f"{n}: {s['last_error'] or s['state']}"
            for n, s in found.items()
            if s["state"] != "ready"
        ]
        good = [f"{n} ({len(s['tools'])} tools)" for n, s in found.items() if s["state"] == "ready"]
        detail = "; ".join([*(["ready: " + ", ".join(good)] if good else []), *bad])
        return Check("mcp", "FAIL" if bad else "ok", detail)

    def browser(self) -> Check:
        """The browser tools' Chromium starts, as the gateway starts it (when one is enabled)."""
        from hermes_gateway.browser import browser_pool

        pool = browser_pool(self.config)
        if pool is None:
            return Check("browser", "skip", "no browser_* tool is enabled")
        try:
            return Check("browser", "ok", pool.probe())
        except Exception as exc:  # no Playwright, no Chromium, a sandbox refusing it
            text = str(exc).strip().splitlines()
            why = text[0] if text else type(exc).__name__
            return Check("browser", "FAIL", f"{pool.settings.executable} does not start: {why}")
        finally:
            pool.close()

    def _platform(self, spec: PlatformSpec) -> Callable[[], Check]:
        """The check of one platform: its spec's probe, run only when it is enabled."""

        def check() -> Check:
            section = getattr(self.config.platforms, spec.name)
            if not section.enabled:
                return Check(spec.name, "skip", "disabled")
            assert spec.probe is not None
            probe = load_ref(spec.probe)
            try:
                return Check(spec.name, "ok", str(probe(section, self.http)))
            except httpx.HTTPError as exc:
                return Check(spec.name, "FAIL", f"unreachable: {exc}")
            except ProbeFailed as exc:
                return Check(spec.name, "FAIL", str(exc))

        check.__name__ = spec.name
        return check


def render(checks: list[Check], out: TextIO, color: bool = False) -> None:
    colors = {"ok": "\033[32m", "warn": "\033[33m", "FAIL": "\033[31m", "skip": "\033[2m"}
    width = max(len(c.name) for c in checks)
    for c in checks:
        mark = f"{colors[c.status]}{c.status:<4}\033[0m" if color else f"{c.status:<4}"
        out.write(f"{c.name:<{width}}  {mark}  {c.detail}\n")
