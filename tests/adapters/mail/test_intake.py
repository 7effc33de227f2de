"""The email adapter's intake against a real Dovecot, with a stand-in for the gateway's side
(`AdapterHost`): a mail is flagged read only after the core took it, and one the store could
not take stays unread and is taken once the store writes again."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

from adapters.mail.adapter import EmailAdapter
from adapters.mail.imap import Mailbox
from hermes_gateway.config import Config
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms import Health
from hermes_gateway.platforms.adapter import SubmitOutcome
from tests.adapters.mail.conftest import BOT, BOT_PW
from tests.adapters.mail.servers import Dovecot
from tests.harness import eventually, make_config

AR = "Authentication-Results: mx.bot.test; dkim=pass header.d=corp.test\r\n"


class OneProcess:
    """The leadership of a single process: always leading."""

    leading = True

    async def acquire(self) -> None:
        return None

    def remaining(self) -> float:
        return math.inf

    async def lost(self) -> None:
        await asyncio.get_running_loop().create_future()

    async def release(self) -> None:
        return None


class Host:
    """What the adapter's intake uses of the gateway: ``outcomes`` answer the submits in turn;
    each submit notes whether its mail was already flagged read in Dovecot."""

    def __init__(
        self, config: Config, dovecot: Dovecot, outcomes: list[SubmitOutcome], lead: Any
    ) -> None:
        self.config = config
        self.lead = lead
        self.dovecot = dovecot
        self.outcomes = outcomes
        self.submitted: list[tuple[str, bool]] = []  # (message id, read already)
        self.waited = 0

    async def submit(self, event: MessageEvent, **how: Any) -> SubmitOutcome:
        read = await asyncio.to_thread(self.read, event.message_id)
        self.submitted.append((event.message_id, read))
        return self.outcomes.pop(0) if self.outcomes else "accepted"

    async def writable(self) -> None:
        self.waited += 1

    def leadership(self, role: str, slots: int = 0) -> Any:
        return self.lead

    def read(self, mid: str) -> bool:
        return any(
            "\\Seen" in flags and mid in str(m["Message-ID"])
            for flags, m in self.dovecot.mails(BOT)
        )


def adapter(
    tmp_path: Path,
    dovecot: Dovecot,
    outcomes: list[SubmitOutcome],
    idle: bool = False,
    lead: Any = None,
) -> EmailAdapter:
    email = {
        "enabled": True,
        "address": BOT,
        "password": BOT_PW,
        "imap_host": "127.0.0.1",
        "imap_port": dovecot.port,
        "imap_security": "none",
        "smtp_host": "127.0.0.1",
        "trusted_authserv_ids": ["mx.bot.test"],
        "idle": idle,  # else the polling fallback
        "poll_interval_s": 300 if idle else 0.2,
    }
    config = make_config(tmp_path, None, platforms={"email": email})
    host = Host(config, dovecot, outcomes, lead or OneProcess())
    return EmailAdapter(host)  # type: ignore[arg-type]


def mail(mid: str) -> bytes:
    return f"{AR}From: alice@corp.test\r\nSubject: hi\r\nMessage-ID: <{mid}>\r\n\r\nhi\r\n".encode()


async def test_a_mail_is_read_only_after_the_core_took_it_and_kept_while_it_cannot(
    tmp_path: Path, dovecot: Dovecot
) -> None:
    """With IDLE and no poll in the test's time: the mail kept is read again as soon as the
    store is writable, not at the next mail or poll."""
    email = adapter(tmp_path, dovecot, ["unavailable", "accepted"], idle=True)
    host: Host = email.host  # type: ignore[assignment]
    dovecot.deliver(BOT, mail("one@corp.test"))
    await email.start()
    try:
        await eventually(lambda: len(host.submitted) == 2, timeout=20)
        await eventually(lambda: host.read("one@corp.test"), timeout=10)
    finally:
        await email.stop()
    # unread at both submits: the first was not taken (the store could not write), so the
    # mail stayed unread and came again once the store was writable
    assert host.submitted == [("one@corp.test", False), ("one@corp.test", False)]
    assert host.waited == 1


async def test_the_supervisor_reconnects_after_the_imap_server_restarts(
    tmp_path: Path, dovecot: Dovecot
) -> None:
    """IDLE, with no poll in the test's time: the lost connection must be noticed by itself."""
    email = adapter(tmp_path, dovecot, [], idle=True)
    host: Host = email.host  # type: ignore[assignment]
    await email.start()
    try:
        assert email.health() == Health(True, "connected (idle)")
        await asyncio.to_thread(dovecot.stop)
        await eventually(lambda: not email.health().ready, timeout=10)
        await asyncio.to_thread(dovecot.start)
        dovecot.deliver(BOT, mail("after@corp.test"))
        await eventually(lambda: host.submitted, timeout=20)
        assert email.health().ready
    finally:
        await email.stop()
    assert host.submitted == [("after@corp.test", False)]


class Lease:
    """A cluster's reader lease the test hands out and takes back."""

    def __init__(self) -> None:
        self.leading = False
        self.granted = asyncio.Event()
        self.taken = asyncio.Event()
        self.released = 0

    async def acquire(self) -> None:
        await self.granted.wait()
        self.leading = True

    def remaining(self) -> float:
        return math.inf if self.leading else 0.0

    async def lost(self) -> None:
        await self.taken.wait()
        self.leading = False

    async def release(self) -> None:
        self.released += 1
        self.leading = False


async def test_in_a_cluster_only_the_lease_holder_reads_the_mailbox(
    tmp_path: Path, dovecot: Dovecot
) -> None:
    lease = Lease()
    email = adapter(tmp_path, dovecot, [], lead=lease)
    host: Host = email.host  # type: ignore[assignment]
    dovecot.deliver(BOT, mail("first@corp.test"))
    await email.start()
    try:
        assert email.health() == Health(True, "stand-by: another instance reads the mailbox")
        await asyncio.sleep(1.0)  # five polls' time: a stand-by reads nothing
        assert host.submitted == []
        lease.granted.set()
        await eventually(lambda: host.submitted, timeout=10)
        lease.granted.clear()
        lease.taken.set()  # another instance took the lease over: this one stops reading
        await eventually(lambda: lease.released == 1, timeout=10)
        dovecot.deliver(BOT, mail("second@corp.test"))
        await asyncio.sleep(1.0)
        assert [mid for mid, _ in host.submitted] == ["first@corp.test"]
        assert email.health().detail == "stand-by: another instance reads the mailbox"
    finally:
        await email.stop()


async def test_odd_message_ids_are_kept_and_found(tmp_path: Path, dovecot: Dovecot) -> None:
    """A Message-ID longer than the inbox's 128-character key is kept as its digest (a
    PostgreSQL inbox would refuse it, and the mail would block intake unread); one with a
    quote and a backslash is still found by the IMAP search that quotes it."""
    long_id, odd_id = "x" * 300 + "@corp.test", 'a"b\\c@corp.test'
    email = adapter(tmp_path, dovecot, [])
    host: Host = email.host  # type: ignore[assignment]
    dovecot.deliver(BOT, mail(long_id))
    dovecot.deliver(BOT, mail(odd_id))
    await email.start()
    try:
        await eventually(lambda: len(host.submitted) == 2, timeout=10)
        box = await Mailbox.open(email.config, "INBOX")
        try:
            assert await box.find(odd_id) == [2]
            assert await box.find(long_id) == [1]
        finally:
            await box.close()
    finally:
        await email.stop()
    first, second = (mid for mid, _ in host.submitted)
    assert first.startswith("digest-") and len(first) <= 128
    assert second == odd_id
