"""A real Synapse homeserver for the Matrix tests: `matrix-synapse` from a venv of its own (the
Python named by HERMES_TEST_SYNAPSE; tests skip without it, `.ci/run` sets it), SQLite in a
temp dir, on 127.0.0.1, users registered through the admin API's shared secret, and a small
client (`MatrixUser`) speaking the client-server API as a person's app would."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import yaml
from aiohttp import web

from tests.e2e.daemon import free_port
from tests.fakes.server import FakeServer

PYTHON = os.environ.get("HERMES_TEST_SYNAPSE", "")  # /path/to/synapse-venv/bin/python
SERVER_NAME = "hermes.test"
_RELAXED = {"per_second": 1000, "burst_count": 1000}
# every limit a test could meet, relaxed: tests send and join faster than people do
_RATE_LIMITS = (
    "rc_message",
    "rc_registration",
    "rc_login",
    "rc_joins",
    "rc_joins_per_room",
    "rc_invites",
    "rc_admin_redaction",
    "rc_3pid_validation",
    "rc_third_party_invite",
    "rc_media_create",
)


def synapse_config(directory: Path, port: int, shared_secret: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server_name": SERVER_NAME,
        "pid_file": str(directory / "homeserver.pid"),
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(directory / "homeserver.db")}},
        "media_store_path": str(directory / "media"),
        "signing_key_path": str(directory / "signing.key"),
        "registration_shared_secret": shared_secret,
        "report_stats": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "enable_registration": False,
        "bcrypt_rounds": 4,  # registering users quickly: test passwords need no strength
        "url_preview_enabled": False,
        "presence": {"enabled": False},
        "log_config": str(directory / "log.yaml"),
    }
    for name in _RATE_LIMITS:
        config[name] = dict(_RELAXED)
    config["rc_joins"] = {"local": dict(_RELAXED), "remote": dict(_RELAXED)}
    config["rc_invites"] = {
        "per_room": dict(_RELAXED),
        "per_user": dict(_RELAXED),
        "per_issuer": dict(_RELAXED),
    }
    return config


_LOG_CONFIG = """version: 1
formatters:
  plain: {format: '%(asctime)s %(levelname)s %(name)s %(message)s'}
handlers:
  file: {class: logging.FileHandler, filename: LOGFILE, formatter: plain}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


class Synapse:
    """One homeserver process: `start` it (several seconds), `register` users, `stop` it."""

    def __init__(self, directory: Path, **overrides: Any) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.secret = secrets.token_hex(16)
        self.overrides = overrides
        self.proc: subprocess.Popen[bytes] | None = None
        self.config_path = directory / "homeserver.yaml"

    def start(self) -> Synapse:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = synapse_config(self.directory, self.port, self.secret) | self.overrides
        self.config_path.write_text(yaml.safe_dump(config))
        log = _LOG_CONFIG.replace("LOGFILE", str(self.directory / "homeserver.log"))
        (self.directory / "log.yaml").write_text(log)
        base = [PYTHON, "-m", "synapse.app.homeserver", "--config-path", str(self.config_path)]
        subprocess.run([*base, "--generate-keys"], check=True, capture_output=True, timeout=120)
        out = (self.directory / "stdout.log").open("wb")
        self.proc = subprocess.Popen(base, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120  # a loaded 2-core machine starts it slowly
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"synapse exited: {self.logs()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/_matrix/client/versions", timeout=2).is_success:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"synapse did not start: {self.logs()[-3000:]}")
            time.sleep(0.2)

    def logs(self) -> str:
        parts = [self.directory / "stdout.log", self.directory / "homeserver.log"]
        return "\n".join(p.read_text(errors="replace") for p in parts if p.exists())

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def register(self, name: str | None = None, admin: bool = False) -> MatrixUser:
        """A new user through the shared-secret admin API, logged in (its own access token)."""
        name = name or f"u{uuid.uuid4().hex[:10]}"
        password = secrets.token_hex(8)
        path = f"{self.url}/_synapse/admin/v1/register"
        nonce = httpx.get(path, timeout=10).json()["nonce"]
        message = "\x00".join([nonce, name, password, "admin" if admin else "notadmin"])
        mac = hmac.new(self.secret.encode(), message.encode(), hashlib.sha1).hexdigest()
        body = {"nonce": nonce, "username": name, "password": password, "admin": admin, "mac": mac}
        answer = httpx.post(path, json=body, timeout=30)
        answer.raise_for_status()
        data = answer.json()
        return MatrixUser(self.url, data["user_id"], data["access_token"], data["device_id"])


@dataclass
class MatrixUser:
    """A person's client on the homeserver (the raw client-server API, as any app speaks it)."""

    url: str
    user_id: str
    token: str
    device_id: str

    def call(self, method: str, path: str, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        answer = httpx.request(
            method, f"{self.url}/_matrix/client/v3{path}", headers=headers, timeout=30, **kw
        )
        answer.raise_for_status()
        return answer.json()

    def create_room(self, invite: list[str] = (), direct: bool = False, **kw: Any) -> str:  # type: ignore[assignment]
        body = {"invite": list(invite), "is_direct": direct, "preset": "private_chat", **kw}
        return str(self.call("POST", "/createRoom", json=body)["room_id"])

    def invite(self, room_id: str, user_id: str) -> None:
        self.call("POST", f"/rooms/{room_id}/invite", json={"user_id": user_id})

    def join(self, room_id: str) -> None:
        self.call("POST", f"/join/{room_id}", json={})

    def send(self, room_id: str, content: dict[str, Any], kind: str = "m.room.message") -> str:
        txn = uuid.uuid4().hex
        return str(
            self.call("PUT", f"/rooms/{room_id}/send/{kind}/{txn}", json=content)["event_id"]
        )

    def say(self, room_id: str, text: str, **extra: Any) -> str:
        return self.send(room_id, {"msgtype": "m.text", "body": text, **extra})

    def upload(self, data: bytes, name: str, mime: str) -> str:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": mime}
        answer = httpx.post(
            f"{self.url}/_matrix/media/v3/upload",
            params={"filename": name},
            content=data,
            headers=headers,
            timeout=30,
        )
        answer.raise_for_status()
        return str(answer.json()["content_uri"])

    def download(self, mxc: str) -> bytes:
        """A file from the media repository, as a client fetches it (authenticated media)."""
        server, media_id = mxc.removeprefix("mxc://").split("/", 1)
        answer = httpx.get(
            f"{self.url}/_matrix/client/v1/media/download/{server}/{media_id}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        answer.raise_for_status()
        return answer.content

    def typing(self, room_id: str) -> list[str]:
        """Who the homeserver says is typing in the room now (each call a filter of its own:
        Synapse answers a repeated identical sync from a cache for two minutes)."""
        room = {
            "rooms": [room_id],
            "timeline": {"limit": 0},
            "state": {"types": []},
            "account_data": {"not_types": [uuid.uuid4().hex]},
        }
        query = {"timeout": 0, "filter": json.dumps({"room": room, "presence": {"types": []}})}
        rooms = self.call("GET", "/sync", params=query).get("rooms", {}).get("join", {})
        events = rooms.get(room_id, {}).get("ephemeral", {}).get("events", [])
        typing = [e for e in events if e.get("type") == "m.typing"]
        return list(typing[-1]["content"]["user_ids"]) if typing else []

    def messages(self, room_id: str) -> list[dict[str, Any]]:
        """The room's message events, oldest first (edits as the events they are)."""
        data = self.call("GET", f"/rooms/{room_id}/messages", params={"dir": "b", "limit": 200})
        events = [e for e in data["chunk"] if e.get("type") == "m.room.message"]
        return list(reversed(events))

    def joined(self, room_id: str) -> list[str]:
        return list(self.call("GET", f"/rooms/{room_id}/joined_members")["joined"])

    def from_user(self, room_id: str, user_id: str) -> list[dict[str, Any]]:
        """``user_id``'s messages in the room, edits folded away (their replacement shown)."""
        events = [e for e in self.messages(room_id) if e.get("sender") == user_id]
        return [e for e in events if not _is_edit(e)]


def _is_edit(event: dict[str, Any]) -> bool:
    relates = event.get("content", {}).get("m.relates_to") or {}
    return relates.get("rel_type") == "m.replace"


def shown_text(user: MatrixUser, room_id: str, event: dict[str, Any]) -> str:
    """The event's text as a client shows it: its latest edit's new content, if edited."""
    edits = [
        e
        for e in user.messages(room_id)
        if _is_edit(e) and e["content"]["m.relates_to"].get("event_id") == event["event_id"]
    ]
    content = edits[-1]["content"]["m.new_content"] if edits else event["content"]
    return str(content.get("body", ""))


def wait_for(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


Hook = Callable[[], None]


class Relay(FakeServer):
    """A loopback relay in front of Synapse that a test can cut (every request refused with a
    dropped connection, as a homeserver going away looks) and arm: ``arm(prefix, hook)`` calls
    ``hook`` once a message whose body starts with ``prefix`` was delivered to Synapse and
    before its answer goes back (a SIGKILL there leaves the part out but unrecorded)."""

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream
        self.down = False
        self.hook: Hook | None = None
        self.prefix = ""
        self.fired = False
        self.sends: list[str] = []  # the transaction ids of the message sends passed on
        self.app.router.add_route("*", "/{tail:.*}", self._relay)
        self._client: aiohttp.ClientSession | None = None

    def arm(self, prefix: str, hook: Hook) -> None:
        self.prefix, self.hook = prefix, hook

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        if self.down:
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError("relay cut")
        if self._client is None:
            self._client = aiohttp.ClientSession(auto_decompress=False)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        async with self._client.request(
            request.method,
            self.upstream + request.path_qs,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=120),
        ) as answer:
            data = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type",)}
        if request.method == "PUT" and "/send/m.room.message/" in request.path:
            self.sends.append(request.path.rsplit("/", 1)[-1])
            self._check(body)
        return web.Response(status=answer.status, body=data, headers=kept)

    def _check(self, body: bytes) -> None:
        try:
            text = str(json.loads(body).get("body", ""))
        except ValueError:
            return
        if self.hook is not None and text.startswith(self.prefix):
            hook, self.hook = self.hook, None
            self.fired = True
            hook()

    async def on_shutdown(self) -> None:
        if self._client is not None:
            await self._client.close()
