"""`hermes gateway run` with email against real servers started by the test: Dovecot (IMAP,
IDLE) holds the bot's mailbox and aiosmtpd takes its replies (delivering the bot's blind
self-copies into Dovecot). An allowed sender is answered in the thread; forged, automatic and
unauthenticated mail never is; a stranger gets one pairing mail; a SIGKILL loses nothing and
answers once (also when the kill lands after the SMTP server took the reply)."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from email.header import decode_header, make_header
from email.message import EmailMessage, Message
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adapters.mail.servers import Dovecot, MailServer, Sent, have_dovecot
from tests.e2e.daemon import GatewayProcess
from tests.fakes.openai import FakeOpenAI
from tests.fakes.server import wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not have_dovecot(), reason="needs dovecot (apt-get install dovecot-imapd)"),
]

BOT, BOT_PW = "bot@bot.test", "bot-secret"
ALICE, MALLORY, EVE = "alice@corp.test", "mallory@else.test", "eve@nowhere.test"
TRUSTED = "mx.bot.test"
# a 1x1 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def ar(domain: str, authserv: str = TRUSTED, result: str = "pass") -> str:
    return f"Authentication-Results: {authserv}; dkim={result} header.d={domain}\r\n"


def user_mail(
    sender: str,
    text: str,
    mid: str,
    *,
    auth: str | None = "",
    subject: str = "hello",
    extra: str = "",
) -> bytes:
    """A mail as the bot's server stores it: its Authentication-Results on top (``auth``:
    "" for a pass for the sender's domain, None for none)."""
    top = ar(sender.rpartition("@")[2]) if auth == "" else (auth or "")
    return (
        f"{top}From: {sender}\r\nTo: {BOT}\r\nSubject: {subject}\r\nMessage-ID: <{mid}>\r\n"
        f"{extra}Content-Type: text/plain; charset=utf-8\r\n\r\n{text}\r\n"
    ).encode()


@pytest.fixture
def servers() -> Iterator[tuple[Dovecot, MailServer]]:
    root = Path(tempfile.mkdtemp(prefix="hermes-mail-", dir="/tmp"))  # short socket paths
    dovecot = Dovecot(root, {BOT: BOT_PW}).start()
    smtp = MailServer(dovecot, {BOT: BOT_PW}).start()
    yield dovecot, smtp
    smtp.stop()
    dovecot.stop()
    shutil.rmtree(root, ignore_errors=True)


def email_gateway(
    home: Path,
    llm: FakeOpenAI,
    dovecot: Dovecot,
    smtp: MailServer,
    vision: bool = False,
    **section: Any,
) -> GatewayProcess:
    email = {
        "enabled": True,
        "address": BOT,
        "imap_host": "127.0.0.1",
        "imap_port": dovecot.port,
        "imap_security": "none",
        "smtp_host": "127.0.0.1",
        "smtp_port": smtp.port,
        "smtp_security": "none",
        "trusted_authserv_ids": [TRUSTED],
        "allowed_users": [ALICE],
        "pairing": True,
        # no poll within any test's waits: a mail is seen through IDLE's push
        "poll_interval_s": 300,
        "sent_check_wait_s": 2,
        **section,
    }
    config = {
        "model": {
            "base_url": llm.base_url,
            "api_key": "sk-fake",
            "max_retries": 0,
            "vision": vision,
        },
        "platforms": {"api": {"enabled": False}, "email": email},
    }
    return GatewayProcess(home, config, env={"EMAIL_PASSWORD": BOT_PW})


def hermes(gateway: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    args = tuple(str(gateway.config_path) if a == "CONFIG" else a for a in args)
    command = [sys.executable, "-m", "hermes_gateway", *args]
    return subprocess.run(command, env=gateway.env, capture_output=True, text=True, timeout=60)


def text_of(mail: Message) -> str:
    part = next(p for p in mail.walk() if p.get_content_type() == "text/plain")
    payload = part.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode().strip()


def ready(gateway: GatewayProcess) -> None:
    wait_until(
        lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code == 200,
        timeout=30,
        explain=gateway.story,
    )


def seen(dovecot: Dovecot, mid: str) -> bool:
    return any(
        "\\Seen" in flags and mid in str(m.get("Message-ID")) for flags, m in dovecot.mails(BOT)
    )


def test_an_allowed_sender_is_answered_in_the_thread_and_forgeries_never(
    tmp_path: Path, fake_llm: FakeOpenAI, servers: tuple[Dovecot, MailServer]
) -> None:
    dovecot, smtp = servers
    gateway = email_gateway(tmp_path / "home", fake_llm, dovecot, smtp, message_limit=200)
    try:
        gateway.start()
        ready(gateway)
        dovecot.deliver(BOT, user_mail(ALICE, "hello there", "a1@corp.test"))
        [reply] = wait_until(lambda: smtp.to(ALICE), timeout=30, explain=gateway.story)
        assert reply["Subject"] == "Re: hello"
        assert reply["In-Reply-To"] == "<a1@corp.test>"
        assert reply["References"] == "<a1@corp.test>"
        assert reply["Auto-Submitted"] == "auto-replied"
        assert reply.get_content_type() == "multipart/alternative"
        assert [p.get_content_type() for p in reply.walk()][1:] == ["text/plain", "text/html"]
        assert text_of(reply) == "echo: hello there"
        assert str(reply["Message-ID"]).startswith("<hermes.")
        wait_until(lambda: seen(dovecot, "a1@corp.test"), timeout=10)
        # the blind self-copy is filed in the sent folder, where the sent-check looks
        sent_folder = wait_until(lambda: dovecot.mails(BOT, "Sent"), timeout=10)
        assert [m["Message-ID"] for _, m in sent_folder] == [reply["Message-ID"]]

        forged = [
            user_mail(ALICE, "no results", "f1@corp.test", auth=None),
            user_mail(ALICE, "untrusted", "f2@corp.test", auth=ar("corp.test", "mx.evil.test")),
            user_mail(ALICE, "other domain", "f3@corp.test", auth=ar("evil.test")),
            user_mail(ALICE, "dkim fail", "f4@corp.test", auth=ar("corp.test", result="fail")),
            # the sender's own "pass" below the trusted server's "fail"
            user_mail(
                ALICE,
                "below",
                "f5@corp.test",
                auth=ar("corp.test", result="fail") + ar("corp.test"),
            ),
            user_mail(f"{ALICE}, boss@corp.test", "two", "f6@corp.test", auth=ar("corp.test")),
            user_mail(f'"{ALICE}" <evil@x.test>', "display", "f7@corp.test", auth=ar("corp.test")),
            user_mail(ALICE, "away", "f8@corp.test", extra="Auto-Submitted: auto-replied\r\n"),
            user_mail(ALICE, "list", "f9@corp.test", extra="List-Id: <l.corp.test>\r\n"),
            user_mail(ALICE, "bulk", "f10@corp.test", extra="Precedence: bulk\r\n"),
            user_mail("MAILER-DAEMON@corp.test", "bounce", "f11@corp.test", auth=ar("corp.test")),
            b"\x00\xff garbage that is no mail at all \r\n\r\n\xfe",
            user_mail(EVE, "unauthenticated stranger", "e1@nowhere.test", auth=None),
            user_mail(MALLORY, "let me in", "m1@else.test"),
            user_mail(MALLORY, "let me in!!", "m2@else.test"),
            user_mail(ALICE, "/status", "a2@corp.test"),
        ]
        for raw in forged:
            dovecot.deliver(BOT, raw)
        wait_until(lambda: len(smtp.to(ALICE)) == 2, timeout=30, explain=gateway.story)
        assert text_of(smtp.to(ALICE)[1]).startswith("Session: email:dm:alice@corp.test:")
        [pairing] = smtp.to(MALLORY)
        assert pairing["In-Reply-To"] == "<m1@else.test>"
        assert smtp.to(EVE) == [] and smtp.to("evil@x.test") == []
        assert len(fake_llm.requests) == 1  # only alice's authenticated mail reached the model
        unread = [
            m["Message-ID"]
            for flags, m in dovecot.mails(BOT)
            if "\\Seen" not in flags and not str(m["Message-ID"]).startswith("<hermes.")
        ]
        assert unread == []  # every mail was read, refused ones too (self-copies aside)

        code = text_of(pairing).split("hermes pairing approve email ")[1].split()[0]
        approved = hermes(gateway, "pairing", "--config", "CONFIG", "approve", "email", code)
        assert approved.returncode == 0, approved.stderr
        wait_until(lambda: len(smtp.to(MALLORY)) == 2, timeout=20)  # the welcome
        dovecot.deliver(BOT, user_mail(MALLORY, "now?", "m3@else.test"))
        wait_until(lambda: len(smtp.to(MALLORY)) == 3, timeout=20, explain=gateway.story)
        assert text_of(smtp.to(MALLORY)[2]) == "echo: now?"

        long = " ".join(f"word{n}" for n in range(80))  # ~550 characters: three mails of 200
        dovecot.deliver(BOT, user_mail(ALICE, long, "a3@corp.test", subject="Re: long"))
        wait_until(lambda: len(smtp.to(ALICE)) >= 5, timeout=20, explain=gateway.story)
        parts = smtp.to(ALICE)[2:]
        assert len(parts) == 3
        assert {p["In-Reply-To"] for p in parts} == {"<a3@corp.test>"}
        assert {p["Subject"] for p in parts} == {"Re: long"}
        assert " ".join(text_of(p) for p in parts).split() == f"echo: {long}".split()
    finally:
        gateway.kill()
    assert BOT_PW not in (tmp_path / "home" / "logs" / "gateway.log").read_text()
    ignored = [e["why"] for e in gateway.log_events() if e["event"] == "email.ignored"]
    assert len(ignored) == 13, ignored  # f1..f11, the garbage and eve's: logged, never answered
    # f1-f5, f7 (evil@x.test, which corp.test's pass does not cover) and eve's
    assert sum(why.startswith("not authenticated") for why in ignored) == 7, ignored


def test_a_sigkill_with_a_mail_in_flight_loses_nothing_and_answers_once(
    tmp_path: Path, fake_llm: FakeOpenAI, servers: tuple[Dovecot, MailServer]
) -> None:
    dovecot, smtp = servers
    gateway = email_gateway(tmp_path / "home", fake_llm, dovecot, smtp)
    try:
        gateway.start()
        ready(gateway)
        fake_llm.delay = 60.0  # the model is still thinking when the gateway dies
        subject = "Grüße"  # 8-bit UTF-8 in the header, as SMTPUTF8 mail comes
        dovecot.deliver(BOT, user_mail(ALICE, "are you there?", "k1@corp.test", subject=subject))
        wait_until(lambda: fake_llm.requests, timeout=30, explain=gateway.story)
        assert seen(dovecot, "k1@corp.test")  # read only once its inbox row was durable
        gateway.kill()  # SIGKILL
        fake_llm.delay = 0.0
        gateway.start()
        [reply] = wait_until(lambda: smtp.to(ALICE), timeout=30, explain=gateway.story)
        assert text_of(reply) == "echo: are you there?"
        # the thread was read back from the answered mail (this process never saw it come in)
        assert reply["In-Reply-To"] == "<k1@corp.test>"
        assert str(make_header(decode_header(reply["Subject"]))) == "Re: Grüße"
        wait_until(lambda: dovecot.mails(BOT, "Sent"), timeout=10)  # settled: the copy filed
        assert len(smtp.to(ALICE)) == 1
    finally:
        gateway.kill()


def test_a_kill_after_the_smtp_server_took_the_reply_does_not_send_it_twice(
    tmp_path: Path, fake_llm: FakeOpenAI, servers: tuple[Dovecot, MailServer]
) -> None:
    """The gateway dies between the server's taking the reply (and delivering its self-copy)
    and its own record of that: after the restart the sent-check finds the copy by its
    Message-ID, so the reply is not sent again and the model is not asked again."""
    dovecot, smtp = servers
    gateway = email_gateway(tmp_path / "home", fake_llm, dovecot, smtp)
    killed: list[int] = []

    def kill_on_data(sent: Sent) -> None:
        if ALICE in sent.rcpts and not killed and gateway.proc is not None:
            killed.append(gateway.proc.pid)
            os.kill(gateway.proc.pid, signal.SIGKILL)

    smtp.handler.hooks.append(kill_on_data)
    try:
        gateway.start()
        ready(gateway)
        dovecot.deliver(BOT, user_mail(ALICE, "once please", "k2@corp.test"))
        wait_until(lambda: gateway.proc is not None and gateway.proc.poll() is not None, timeout=30)
        assert len(smtp.to(ALICE)) == 1 and killed
        gateway.start()
        checked = wait_until(
            lambda: [e for e in gateway.log_events() if e["event"] == "email.sent_check"],
            timeout=30,
            explain=gateway.story,
        )
        wait_until(lambda: len(dovecot.mails(BOT, "Sent")) == len(smtp.sent), timeout=10)
        assert len(smtp.to(ALICE)) == 1
        assert checked[0]["found"] is True
        assert len(fake_llm.requests) == 1  # delivered from the inbox, not computed again
    finally:
        gateway.kill()


def test_an_image_attachment_is_fetched_when_the_model_needs_it(
    tmp_path: Path, fake_llm: FakeOpenAI, servers: tuple[Dovecot, MailServer]
) -> None:
    """The mail is read without saving its attachments; the image is fetched from the mailbox
    (by its mail's Message-ID) when the run prepares it for the model, and one over
    `media_max_bytes` never is."""
    dovecot, smtp = servers
    gateway = email_gateway(
        tmp_path / "home", fake_llm, dovecot, smtp, vision=True, media_max_bytes=4096
    )
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = ALICE, BOT, "a picture"
    message["Message-ID"] = "<img1@corp.test>"
    message.set_content("what is this?")
    message.add_attachment(PNG, maintype="image", subtype="png", filename="dot.png")
    message.add_attachment(
        b"\x89PNG" + b"x" * 8000, maintype="image", subtype="png", filename="big.png"
    )
    raw = ar("corp.test").encode() + message.as_bytes()
    try:
        gateway.start()
        ready(gateway)
        dovecot.deliver(BOT, raw)
        wait_until(lambda: smtp.to(ALICE), timeout=30, explain=gateway.story)
    finally:
        gateway.kill()
    content = fake_llm.requests[0]["messages"][-1]["content"]
    urls = [c["image_url"]["url"] for c in content if c.get("type") == "image_url"]
    assert urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    media = list((tmp_path / "home" / "media").iterdir())
    assert [p.name.split("-", 1)[1] for p in media] == ["dot.png"]  # the big one never fetched


@pytest.mark.slow  # the default suite's reconnect check is tests/adapters/mail/test_intake.py
def test_the_supervisor_reconnects_after_the_imap_server_restarts(
    tmp_path: Path, fake_llm: FakeOpenAI, servers: tuple[Dovecot, MailServer]
) -> None:
    dovecot, smtp = servers
    gateway = email_gateway(tmp_path / "home", fake_llm, dovecot, smtp)
    try:
        gateway.start()
        ready(gateway)
        dovecot.stop()  # the IDLE connection drops
        wait_until(
            lambda: httpx.get(f"{gateway.url}/readyz", timeout=2).status_code != 200, timeout=20
        )
        dovecot.start()
        ready(gateway)
        dovecot.deliver(BOT, user_mail(ALICE, "still there?", "r1@corp.test"))
        [reply] = wait_until(lambda: smtp.to(ALICE), timeout=30, explain=gateway.story)
        assert text_of(reply) == "echo: still there?"
    finally:
        gateway.kill()
    events = [e["event"] for e in gateway.log_events()]
    assert events.count("email.started") >= 2


def test_doctor_logs_in_to_imap_and_smtp_for_real(
    tmp_path: Path, fake_llm: FakeOpenAI, servers: tuple[Dovecot, MailServer]
) -> None:
    """`hermes doctor` runs the probe; its refusals are `tests/adapters/mail/test_probe.py`."""
    dovecot, smtp = servers
    gateway = email_gateway(tmp_path / "home", fake_llm, dovecot, smtp)
    doctor = hermes(gateway, "doctor", "--config", "CONFIG")
    assert f"imap and smtp logins ok: {BOT}" in doctor.stdout, doctor.stdout + doctor.stderr


def test_a_send_whose_answer_is_lost_is_not_sent_again_by_the_retry(
    tmp_path: Path, fake_llm: FakeOpenAI, servers: tuple[Dovecot, MailServer]
) -> None:
    """The server takes the reply (and delivers its self-copy) but answers only after the
    gateway's SMTP timeout: the retry finds the copy by its Message-ID and sends nothing."""
    dovecot, smtp = servers
    gateway = email_gateway(tmp_path / "home", fake_llm, dovecot, smtp, timeout_s=1)
    slow: list[bool] = []

    def answer_late(sent: Sent) -> None:
        if ALICE in sent.rcpts and not slow:
            slow.append(True)
            time.sleep(2.5)  # the client gave up waiting for "250" meanwhile

    smtp.handler.hooks.append(answer_late)
    try:
        gateway.start()
        ready(gateway)
        dovecot.deliver(BOT, user_mail(ALICE, "slow server", "t1@corp.test"))
        wait_until(
            lambda: [e for e in gateway.log_events() if e["event"] == "email.sent"],
            timeout=30,
            explain=gateway.story,
        )
        wait_until(lambda: len(dovecot.mails(BOT, "Sent")) == len(smtp.sent), timeout=10)
        assert len(smtp.to(ALICE)) == 1
    finally:
        gateway.kill()
    events = [e["event"] for e in gateway.log_events()]
    assert "email.sent_despite_error" in events
