"""`hermes doctor`: check what the gateway needs, in plain words, with real calls.

Config, home permissions, the store, the control port, the model endpoint (`/models`) and each
enabled platform's token (getMe, users/@me, auth.test). Exit 1 when anything failed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TextIO

import httpx

from hermes_gateway.config import Config
from hermes_gateway.errors import StoreError
from hermes_gateway.store import Store
from hermes_gateway.store_engine import safe_url

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
            self.telegram,
            self.discord,
            self.slack,
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
            for p in (home, home / "gateway.env", home / "state.db")
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

    def telegram(self) -> Check:
        tg = self.config.platforms.telegram
        if not tg.enabled:
            return Check("telegram", "skip", "disabled")
        return self._platform_call(
            "telegram",
            lambda: self.http.post(f"{tg.base_url}{tg.token}/getMe"),
            lambda data: f"@{data['result']['username']}" if data.get("ok") else None,
        )

    def discord(self) -> Check:
        dc = self.config.platforms.discord
        if not dc.enabled:
            return Check("discord", "skip", "disabled")
        return self._platform_call(
            "discord",
            lambda: self.http.get(
                f"{dc.api_base}/users/@me", headers={"Authorization": f"Bot {dc.token}"}
            ),
            lambda data: str(data["username"]) if "username" in data else None,
        )

    def slack(self) -> Check:
        sl = self.config.platforms.slack
        if not sl.enabled:
            return Check("slack", "skip", "disabled")
        base = sl.api_base if sl.api_base.endswith("/") else sl.api_base + "/"
        return self._platform_call(
            "slack",
            lambda: self.http.post(
                f"{base}auth.test", headers={"Authorization": f"Bearer {sl.bot_token}"}
            ),
            lambda data: f"{data.get('user')} in {data.get('team')}" if data.get("ok") else None,
        )

    def _platform_call(
        self,
        name: str,
        call: Callable[[], httpx.Response],
        describe: Callable[[dict[str, Any]], str | None],
    ) -> Check:
        try:
            r = call()
        except httpx.HTTPError as exc:
            return Check(name, "FAIL", f"unreachable: {exc}")
        try:
            data = r.json()
        except ValueError:
            data = {}
        who = describe(data) if r.status_code == 200 and isinstance(data, dict) else None
        if who is None:
            reason = data.get("description") or data.get("error") or data.get("message")
            return Check(name, "FAIL", f"token rejected (HTTP {r.status_code}: {reason})")
        return Check(name, "ok", f"token valid: {who}")


def render(checks: list[Check], out: TextIO, color: bool = False) -> None:
    colors = {"ok": "\033[32m", "warn": "\033[33m", "FAIL": "\033[31m", "skip": "\033[2m"}
    width = max(len(c.name) for c in checks)
    for c in checks:
        mark = f"{colors[c.status]}{c.status:<4}\033[0m" if color else f"{c.status:<4}"
        out.write(f"{c.name:<{width}}  {mark}  {c.detail}\n")
