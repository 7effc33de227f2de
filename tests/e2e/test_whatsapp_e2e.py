"""`hermes gateway run` as a real process on WhatsApp: the fake Cloud API posts signed webhooks
to the gateway's control port and serves the Graph API. Meta's subscription check, signatures
(a bad one refused before any parsing), an allowed user answered with a read receipt, a repeat
delivery folded, a command, a long answer split at 4096, an image fetched on demand, odd
payloads skipped, a stranger paired; rate limits, the closed 24-hour window, an undeliverable
number, an expired token and an unreachable Graph API; `hermes doctor`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI, text
from tests.fakes.server import wait_until
from tests.fakes.whatsapp import FakeWhatsApp
from tests.integration.test_tools_gateway import PNG

pytestmark = pytest.mark.e2e
ALICE, BOB = "15550001111", "15550002222"
WEBHOOK = "/whatsapp/webhook"


@pytest.fixture
def wa() -> Iterator[FakeWhatsApp]:
    with FakeWhatsApp() as fake:
        yield fake  # type: ignore[misc]


def wa_gateway(
    home: Path, llm: FakeOpenAI, fake: FakeWhatsApp, token: str = "", **section: Any
) -> GatewayProcess:
    config: dict[str, Any] = {
        "model": {"base_url": llm.base_url, "api_key": "sk-fake", "max_retries": 0, "vision": True},
        "platforms": {
            "whatsapp": {
                "enabled": True,
                "api_base": fake.api_base,
                "phone_number_id": fake.phone_number_id,
                "allowed_users": [ALICE],
                **section,
            }
        },
    }
    # the secrets come from the environment, as in a systemd unit's EnvironmentFile
    env = {
        "WHATSAPP_ACCESS_TOKEN": token or fake.token,
        "WHATSAPP_APP_SECRET": fake.app_secret,
        "WHATSAPP_VERIFY_TOKEN": fake.verify_token,
    }
    gateway = GatewayProcess(home, config, env=env)
    fake.webhook_url = f"{gateway.url}{WEBHOOK}"
    return gateway


def ready(gateway: GatewayProcess) -> bool:
    return httpx.get(f"{gateway.url}/readyz", timeout=5).status_code == 200


def hermes(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``hermes <command> --config <the gateway's file> <rest>``, as the operator runs it."""
    head, *rest = args
    command = [sys.executable, "-m", "hermes_gateway", head, "--config", str(gateway.config_path)]
    command += rest
    return subprocess.run(command, env=gateway.env, capture_output=True, text=True, timeout=60)


def answers(fake: FakeWhatsApp, user: str, count: int) -> list[str]:
    return list(wait_until(lambda: (t := fake.texts_to(user)) and len(t) >= count and t, 20))


def check_the_gates(wa: FakeWhatsApp, llm: FakeOpenAI) -> None:
    """Meta's subscription check; deliveries not signed with the app secret refused unread."""
    assert wa.verify(wa.verify_token, challenge="1158201444") == (200, "1158201444")
    assert wa.verify("not-the-token")[0] == 403
    assert wa.verify(wa.verify_token, mode="unsubscribe")[0] == 403
    forged = wa.message(ALICE, "text", {"body": "forged"})
    assert wa.deliver(forged, signature="sha256=" + "0" * 64) == 401
    assert wa.deliver(forged, signature="") == 401
    # not even JSON: a 401 (not a 400) shows nothing parsed it before the signature check
    assert wa.deliver(b"{not json", signature="sha256=" + "1" * 64) == 401
    assert wa.deliver(b"{not json") == 400  # signed, then parsed
    assert wa.deliver(b"x" * 300_000) == 413  # over control.max_webhook_body_bytes: not read
    assert llm.requests == [] and wa.sent == []


def check_odd_payloads(wa: FakeWhatsApp) -> None:
    """Signed but odd shapes: skipped with a 200 (Meta would redeliver anything else)."""
    odd: list[Any] = [
        {"object": "whatsapp_business_account", "entry": "x"},
        {"object": "page", "entry": []},
        wa.envelope(
            {"messages": [5, {"type": "text"}, {"from": ALICE, "id": "w1", "type": "text"}]}
        ),
        wa.envelope({"messages": [{"from": ALICE, "id": "w2", "type": "text", "text": "flat"}]}),
        wa.envelope({"messages": [{"from": ALICE, "id": "w3", "type": "location"}]}),
        wa.envelope({"statuses": [{"id": 7}, "x"], "errors": [{"code": 131000, "title": "?"}]}),
        [1, 2],
    ]
    for payload in odd:
        assert wa.deliver(payload) == 200, payload


def test_a_whatsapp_chat_end_to_end_through_the_daemon(
    tmp_path: Path, fake_llm: FakeOpenAI, wa: FakeWhatsApp
) -> None:
    gateway = wa_gateway(tmp_path / "home", fake_llm, wa, pairing=True, media_max_bytes=30_000)
    paragraphs = [f"part{n} " + " ".join(f"w{n}x{j}" for j in range(500)) for n in (1, 2, 3)]
    try:
        gateway.start()
        wait_until(lambda: ready(gateway), timeout=20)
        check_the_gates(wa, fake_llm)

        wamid, status = wa.send_text(ALICE, "hello whatsapp")
        assert status == 200
        assert answers(wa, ALICE, 1) == ["echo: hello whatsapp"]
        first = wa.sent[0]
        assert first["context"] == {"message_id": wamid}  # quotes the question
        assert len(first["biz_opaque_callback_data"]) == 24  # the part's key, echoed in statuses
        wait_until(lambda: wa.reads, timeout=10)
        assert wa.reads[0]["message_id"] == wamid
        assert wa.reads[0]["typing_indicator"] == {"type": "text"}

        # Meta delivers again (at least once): the inbox folds the repeat by its wamid
        repeat = wa.message(ALICE, "text", {"body": "say it once"})
        assert wa.deliver(repeat) == 200 and wa.deliver(repeat) == 200
        assert answers(wa, ALICE, 2)[1] == "echo: say it once"

        wa.send_text(ALICE, "/status")  # answered by the gateway itself, no model call
        answers(wa, ALICE, 3)
        assert len(fake_llm.requests) == 2

        fake_llm.push(text("\n\n".join(paragraphs)))
        wa.send_text(ALICE, "a long one please")
        long = answers(wa, ALICE, 6)[3:]
        assert [p.split()[0] for p in long] == ["part1", "part2", "part3"]
        assert all(len(p) <= 4096 for p in long) and sum(map(len, long)) > 4096

        wa.add_media("MEDIA123", PNG, "image/png")
        image = {"id": "MEDIA123", "mime_type": "image/png", "caption": "what is it?"}
        assert wa.deliver(wa.message(ALICE, "image", image)) == 200
        answers(wa, ALICE, 7)
        assert wa.media_fetches == ["MEDIA123"]  # fetched from the Graph media url, on demand
        content = fake_llm.requests[-1]["messages"][-1]["content"]
        assert any(p.get("type") == "image_url" for p in content if isinstance(p, dict))
        wa.add_media("MEDIABIG", PNG + bytes(40_000), "image/png")  # over media_max_bytes
        big = {"id": "MEDIABIG", "mime_type": "image/png"}
        assert wa.deliver(wa.message(ALICE, "image", big)) == 200
        answers(wa, ALICE, 8)
        assert ("GET", "/v21.0/MEDIABIG") in wa.calls  # looked up, its size said no
        assert wa.media_fetches == ["MEDIA123"]  # and never downloaded

        check_odd_payloads(wa)
        check_pairing(gateway, wa, fake_llm)
        wa.send_text(ALICE, "still there?")  # nothing odd stopped the intake
        assert answers(wa, ALICE, 9)[-1] == "echo: still there?"
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(15) == 0
    finally:
        gateway.kill()
    log = (tmp_path / "home" / "logs" / "gateway.log").read_text()
    assert wa.token not in log and wa.app_secret not in log
    events = [e["event"] for e in gateway.log_events()]
    assert "whatsapp.started" in events and "whatsapp.webhook_verified" in events


def check_pairing(gateway: GatewayProcess, wa: FakeWhatsApp, llm: FakeOpenAI) -> None:
    """A stranger gets a pairing code and no model call; once approved, an answer."""
    calls = len(llm.requests)
    wa.send_text(BOB, "let me in")
    [code_reply] = answers(wa, BOB, 1)
    assert "hermes pairing approve whatsapp " in code_reply
    assert len(llm.requests) == calls
    code = code_reply.split("hermes pairing approve whatsapp ")[1].split()[0]
    approved = hermes(gateway, "pairing", "approve", "whatsapp", code)
    assert approved.returncode == 0, approved.stderr
    answers(wa, BOB, 2)  # "you're approved"
    wa.send_text(BOB, "now?")
    assert answers(wa, BOB, 3)[2] == "echo: now?"


def test_rate_limits_retried_a_closed_window_templated_and_an_expired_token_shown(
    tmp_path: Path, fake_llm: FakeOpenAI, wa: FakeWhatsApp
) -> None:
    template = {"name": "hello_again", "language": "en_US"}
    users = [ALICE, BOB, "15559999999"]
    gateway = wa_gateway(tmp_path / "home", fake_llm, wa, template=template, allowed_users=users)
    wa.unavailable = True  # Graph answers 503: the gateway serves, WhatsApp not ready
    try:
        gateway.start()
        wait_until(lambda: "whatsapp" in httpx.get(f"{gateway.url}/readyz").text, timeout=20)
        assert not ready(gateway)
        wa.unavailable = False
        wait_until(lambda: ready(gateway), timeout=20)  # the supervisor tried again

        wa.fail_next(130429)  # the number's throughput: waited out, then sent once
        wa.send_text(ALICE, "busy?")
        assert answers(wa, ALICE, 1) == ["echo: busy?"]
        assert len(wa.sent) == 1

        late = wa.message(BOB, "text", {"body": "hello after a while"})
        wa.last_wrote[BOB] = time.time() - 25 * 3600  # Meta says the window is closed
        assert wa.deliver(late) == 200
        wait_until(lambda: any(m["type"] == "template" for m in wa.sent), timeout=20)
        assert wa.texts_to(BOB) == []
        assert [m["template"]["name"] for m in wa.sent if m["to"] == BOB] == ["hello_again"]

        wa.send_text("15559999999", "from a number WhatsApp cannot reach")
        wait_until(lambda: "whatsapp.delivery_failed" in events_of(gateway), timeout=20)

        wa.token = "EAArevokedrevokedrevokedrevoked"  # the token expired on Meta's side
        wa.send_text(ALICE, "anyone?")
        wait_until(lambda: "access token rejected" in httpx.get(f"{gateway.url}/readyz").text, 20)
        assert not ready(gateway)
        gateway.signal(signal.SIGTERM)
        assert gateway.wait(15) == 0
    finally:
        gateway.kill()
    failed = [e for e in gateway.log_events() if e["event"] == "whatsapp.delivery_failed"]
    assert failed[0]["error"].startswith("131026")
    closed = [e for e in gateway.log_events() if e["event"] == "whatsapp.window_closed"]
    assert closed and closed[0]["template"] == "hello_again"


def events_of(gateway: GatewayProcess) -> list[str]:
    return [e["event"] for e in gateway.log_events()]


def test_a_closed_window_without_a_template_is_logged_not_silent(
    tmp_path: Path, fake_llm: FakeOpenAI, wa: FakeWhatsApp
) -> None:
    gateway = wa_gateway(tmp_path / "home", fake_llm, wa, allowed_users=[ALICE, BOB])
    day_ago = str(int(time.time()) - 25 * 3600)
    try:
        gateway.start()
        wait_until(lambda: ready(gateway), timeout=20)
        # a message that reached the gateway a day late: its own time says the window closed
        assert wa.deliver(wa.message(ALICE, "text", {"body": "sent long ago"}, timestamp=day_ago))
        wait_until(lambda: events_of(gateway).count("whatsapp.window_closed") == 1, timeout=20)
        late = wa.message(BOB, "text", {"body": "hello after a while"})
        wa.last_wrote[BOB] = time.time() - 25 * 3600  # Meta says the window is closed
        assert wa.deliver(late) == 200
        wait_until(lambda: events_of(gateway).count("whatsapp.window_closed") == 2, timeout=20)
    finally:
        gateway.kill()
    closed = [e for e in gateway.log_events() if e["event"] == "whatsapp.window_closed"]
    assert [e["chat_id"] for e in closed] == [ALICE, BOB]
    assert all(e["level"] == "error" and "no template configured" in e["hint"] for e in closed)
    assert wa.sent == []
    assert [a["to"] for a in wa.attempts] == [BOB]  # refused by Graph; Alice's never tried


def test_doctor_checks_the_token_against_the_graph_api(
    tmp_path: Path, fake_llm: FakeOpenAI, wa: FakeWhatsApp
) -> None:
    good = wa_gateway(tmp_path / "good", fake_llm, wa)
    doctor = hermes(good, "doctor")
    assert "token valid: Hermes Test" in doctor.stdout, doctor.stdout + doctor.stderr
    assert ("GET", f"/v21.0/{wa.phone_number_id}") in wa.calls
    bad = wa_gateway(tmp_path / "bad", fake_llm, wa, token="EAAwrongwrongwrongwrongwrong")
    doctor = hermes(bad, "doctor")
    assert doctor.returncode != 0
    assert "token rejected (HTTP 401" in doctor.stdout, doctor.stdout
    assert "EAAwrongwrongwrongwrongwrong" not in doctor.stdout + doctor.stderr


def test_a_token_meta_rejects_at_start_exits_78(
    tmp_path: Path, fake_llm: FakeOpenAI, wa: FakeWhatsApp
) -> None:
    gateway = wa_gateway(tmp_path / "home", fake_llm, wa, token="EAAwrongwrongwrongwrongwrong")
    try:
        gateway.start(wait=False)
        assert gateway.wait(30) == 78
    finally:
        gateway.kill()
    assert "190" in gateway.stderr()
