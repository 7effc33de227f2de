"""`hermes gateway run` as a real process with webhook routes on its control port: signed
requests answered in the response, refused unsigned, stale, oversized or replayed (no model
call), a GitHub push rendered through its template, answers sent to a callback on 127.0.0.1
(allowed by `callback_networks`, as the web tools' tests allow loopback) and to a chat on the
fake Telegram; a SIGKILL with requests in flight loses none and delivers each once."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.e2e.daemon import GatewayProcess, telegram_config
from tests.fakes.openai import FakeOpenAI, hang, text
from tests.fakes.server import FakeServer, wait_until
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.e2e
SECRET = "s3cret-for-the-ci-route-0123"
GH_SECRET = "github-secret-abcdefghijklmnop"
CHAT = 555


class CallbackSink(FakeServer):
    """Records each callback POST (headers and JSON body)."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.app.router.add_post("/hook", self._hook)

    async def _hook(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.json()))
        return web.json_response({"ok": True})


def signed(
    body: bytes, delivery: str, secret: str = SECRET, stamp: int | None = None
) -> dict[str, str]:
    """The hermes scheme's headers, computed as the README's openssl line does."""
    t = int(time.time()) if stamp is None else stamp
    mac = hmac.new(secret.encode(), f"{t}.{delivery}.".encode() + body, hashlib.sha256)
    return {
        "Content-Type": "application/json",
        "X-Hermes-Delivery": delivery,
        "X-Hermes-Signature": f"t={t},v1={mac.hexdigest()}",
    }


def github(body: bytes, delivery: str, event: str = "push") -> dict[str, str]:
    mac = hmac.new(GH_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Event": event,
        "X-Hub-Signature-256": f"sha256={mac}",
    }


def routes(sink: CallbackSink | None = None) -> dict[str, Any]:
    return {
        "ci": {
            "secret": "${CI_HOOK_SECRET}",
            "template": "CI alert {alert.name}: {alert.summary}",
            "timeout_s": 20,
        },
        "gh": {
            "secret": GH_SECRET,
            "scheme": "github",
            "template": "{@event} to {repository.full_name} by {pusher.name}: "
            "{head_commit.message}",
            "field_chars": 20,
        },
        "cb": {
            "secret": SECRET,
            "template": "callback {n}",
            "deliver": "callback",
            "callback_url": f"{sink.url}/hook" if sink else "http://127.0.0.1:9/hook",
        },
        "raw": {"secret": SECRET, "template": "{text}", "session_field": "team"},
        "tg": {"secret": SECRET, "template": "to telegram {n}", "deliver": f"telegram:{CHAT}"},
        # answered in the response within 1 s, else in the Telegram chat
        "slow": {
            "secret": SECRET,
            "template": "slow {n}",
            "timeout_s": 1,
            "fallback": f"telegram:{CHAT}",
        },
        # the same with a timeout no test outlasts: a client still waits when the kill comes
        "hold": {
            "secret": SECRET,
            "template": "slow {n}",
            "timeout_s": 120,
            "fallback": f"telegram:{CHAT}",
        },
    }


@pytest.fixture
def sink() -> Iterator[CallbackSink]:
    server = CallbackSink()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake


def gateway_for(
    home: Path, llm: FakeOpenAI, fake: FakeTelegram, sink: CallbackSink, **extra: Any
) -> GatewayProcess:
    config = telegram_config(llm, fake, fake.token, [1])
    config["platforms"]["webhook"] = {
        "enabled": True,
        "routes": routes(sink),
        "callback_networks": ["127.0.0.1/32"],
        **extra,
    }
    config["control"] = {"max_webhook_body_bytes": 4096}
    return GatewayProcess(home, config, env={"CI_HOOK_SECRET": SECRET})


def post(gw: GatewayProcess, route: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{gw.url}/webhooks/{route}", content=body, headers=headers, timeout=30)


def test_signed_requests_are_answered_and_the_rest_refused_without_a_model_call(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, sink: CallbackSink
) -> None:
    gw = gateway_for(tmp_path / "home", fake_llm, telegram, sink)
    try:
        gw.start()
        body = json.dumps({"alert": {"name": "disk", "summary": "95% full"}}).encode()
        first = post(gw, "ci", body, signed(body, "d-1"))
        assert first.status_code == 200, first.text
        assert first.json()["text"] == "echo: CI alert disk: 95% full"
        assert first.json()["status"] == "answered"
        assert len(fake_llm.requests) == 1

        # the same delivery again (a replay or a sender's retry): no second run
        again = post(gw, "ci", body, signed(body, "d-1"))
        assert (again.status_code, again.json()["status"]) == (200, "duplicate")
        # refused before the body is parsed: a bad signature, none, another id, a stale time
        bad = signed(body, "d-2", secret="not-the-secret-at-all")
        assert post(gw, "ci", body, bad).status_code == 401
        assert post(gw, "ci", body, {"X-Hermes-Delivery": "d-3"}).status_code == 401
        swapped = {**signed(body, "d-4"), "X-Hermes-Delivery": "d-5"}
        assert post(gw, "ci", body, swapped).status_code == 401
        stale = post(gw, "ci", body, signed(body, "d-6", stamp=int(time.time()) - 400))
        assert stale.status_code == 401 and "stale timestamp" in stale.text
        assert post(gw, "ci", b"not json", signed(b"not json", "d-7")).status_code == 400
        big = json.dumps({"alert": {"name": "x" * 5000}}).encode()
        assert post(gw, "ci", big, signed(big, "d-8")).status_code == 413
        assert len(fake_llm.requests) == 1

        push = {
            "repository": {"full_name": "acme/widgets"},
            "pusher": {"name": "ada"},
            "head_commit": {"message": "Fix the frobnicator's off-by-one error in the loop"},
        }
        raw = json.dumps(push).encode()
        r = post(gw, "gh", raw, github(raw, str(uuid.uuid4())))
        assert r.status_code == 200, r.text
        # the commit message cut at the route's field_chars (20)
        assert r.json()["text"] == "echo: push to acme/widgets by ada: Fix the frobnicator…"
        tampered = raw.replace(b"ada", b"eve")
        assert post(gw, "gh", tampered, github(raw, "gh-2")).status_code == 401
        assert len(fake_llm.requests) == 2

        # a payload's text is never a chat command; its session is the one its field names
        cmd = json.dumps({"text": "/reset", "team": "ops"}).encode()
        r = post(gw, "raw", cmd, signed(cmd, "raw-1"))
        assert r.json()["text"] == "echo: [webhook] /reset"
        assert r.json()["session"] == "raw:ops"
        assert len(fake_llm.requests) == 3
    finally:
        gw.kill()
    log = (tmp_path / "home" / "logs" / "gateway.log").read_text()
    assert SECRET not in log and GH_SECRET not in log


def test_doctor_and_config_check_look_at_the_routes(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, sink: CallbackSink
) -> None:
    gw = gateway_for(tmp_path / "home", fake_llm, telegram, sink)
    doctor = hermes(gw, "doctor")
    assert "webhook" in doctor.stdout and "7 route(s)" in doctor.stdout, doctor.stdout
    assert "cb (hermes, to callback)" in doctor.stdout
    # without callback_networks the SSRF guard refuses the callback on 127.0.0.1
    closed = gateway_for(tmp_path / "closed", fake_llm, telegram, sink, callback_networks=[])
    refused = hermes(closed, "config", "check")
    assert refused.returncode == 78, refused.stdout + refused.stderr
    assert "platforms.webhook.routes.cb.deliver" in refused.stdout + refused.stderr
    gw.env.pop("CI_HOOK_SECRET")
    missing = hermes(gw, "config", "check")
    assert missing.returncode == 78
    assert "CI_HOOK_SECRET" in missing.stdout + missing.stderr


def hermes(gw: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "hermes_gateway", *args, "--config", str(gw.config_path)]
    return subprocess.run(command, env=gw.env, capture_output=True, text=True, timeout=60)


def docs_sample() -> str:
    """The ```sh block of docs/platforms.md's Webhook section."""
    text = (Path(__file__).parents[2] / "docs" / "platforms.md").read_text()
    section = text.split("\n## Webhook\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_answers_go_to_a_callback_and_to_a_telegram_chat(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, sink: CallbackSink
) -> None:
    gw = gateway_for(tmp_path / "home", fake_llm, telegram, sink)
    try:
        gw.start()
        body = b'{"n": 1}'
        r = post(gw, "cb", body, signed(body, "cb-1"))
        assert (r.status_code, r.json()["status"]) == (202, "accepted")
        wait_until(lambda: sink.received, timeout=20, explain=gw.story)
        headers, answer = sink.received[0]
        assert answer["text"] == "echo: callback 1" and answer["delivery"] == "cb-1"
        # the callback is signed with the route's secret, over its own body
        raw = json.dumps(answer, ensure_ascii=False).encode()
        stamp = headers["X-Hermes-Signature"].split(",")[0][2:]
        mac = hmac.new(SECRET.encode(), f"{stamp}.cb-1.".encode() + raw, hashlib.sha256)
        assert headers["X-Hermes-Signature"].endswith(mac.hexdigest())

        # the documented sample, as an operator pastes it: curl, the signature by openssl
        if shutil.which("curl") and shutil.which("openssl"):
            sample = docs_sample().replace("http://127.0.0.1:8642", gw.url)
            env = {"PATH": os.environ["PATH"], "CI_HOOK_SECRET": SECRET}
            shell = subprocess.run(["sh", "-c", sample], env=env, capture_output=True, text=True)
            assert json.loads(shell.stdout)["text"] == "echo: CI alert disk: 95% full on db1"

        r = post(gw, "tg", body, signed(body, "tg-1"))
        assert r.status_code == 202
        wait_until(lambda: telegram.messages_to(CHAT) or telegram.messages_to(str(CHAT)))
        sent = telegram.messages_to(CHAT) or telegram.messages_to(str(CHAT))
        assert [m["text"] for m in sent] == ["echo: to telegram 1"]
    finally:
        gw.kill()


def test_an_answer_past_the_timeout_is_202_and_goes_to_the_fallback(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, sink: CallbackSink
) -> None:
    gw = gateway_for(tmp_path / "home", fake_llm, telegram, sink)
    try:
        gw.start()
        fake_llm.push(text("late answer", delay=2.5))
        body = b'{"n": 3}'
        r = post(gw, "slow", body, signed(body, "slow-1"))
        assert r.status_code == 202, r.text
        assert r.json() == {
            "status": "accepted",
            "delivery": "slow-1",
            "answer_to": f"telegram:{CHAT}",
        }
        wait_until(lambda: telegram.sent, timeout=20, explain=gw.story)
        assert [m["text"] for m in telegram.sent] == ["late answer"]
    finally:
        gw.kill()


def test_a_sigkill_with_requests_in_flight_delivers_each_once_after_the_restart(
    tmp_path: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, sink: CallbackSink
) -> None:
    gw = gateway_for(tmp_path / "home", fake_llm, telegram, sink)
    try:
        gw.start()
        fake_llm.push(hang(60), hang(60), hang(60))  # every run waits on the model at the kill
        body = b'{"n": 2}'
        assert post(gw, "cb", body, signed(body, "cb-2")).status_code == 202
        assert post(gw, "tg", body, signed(body, "tg-2")).status_code == 202
        # a synchronous request whose client waits when the gateway dies
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(post, gw, "hold", body, signed(body, "hold-2"))
            wait_until(lambda: len(fake_llm.requests) == 3, timeout=20, explain=gw.story)
            gw.kill()  # SIGKILL: accepted means stored, so all are run again at the next start
            with pytest.raises(httpx.HTTPError):
                waiting.result(10)
        assert not sink.received and not telegram.sent

        gw.start()
        wait_until(lambda: sink.received and len(telegram.sent) >= 2, timeout=30, explain=gw.story)
        time.sleep(1.0)  # room for a second copy, which must not come
        assert [a["text"] for _, a in sink.received] == ["echo: callback 2"]
        # the synchronous request's client is gone: its answer goes to the route's fallback
        texts = sorted(m["text"] for m in telegram.sent)
        assert texts == ["echo: slow 2", "echo: to telegram 2"]
        # the senders' redeliveries after the crash are duplicates, not second runs
        calls = len(fake_llm.requests)
        assert post(gw, "cb", body, signed(body, "cb-2")).json()["status"] == "duplicate"
        assert post(gw, "tg", body, signed(body, "tg-2")).json()["status"] == "duplicate"
        assert post(gw, "hold", body, signed(body, "hold-2")).json()["status"] == "duplicate"
        assert len(fake_llm.requests) == calls
    finally:
        gw.kill()
