"""`hermes doctor`'s email probe against the real servers: an IMAP LOGIN and an SMTP AUTH with
the configured credentials, and which of the two refused."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from adapters.mail.probe import probe
from adapters.mail.settings import EmailConfig
from hermes_gateway.platforms import ProbeFailed
from tests.adapters.mail.conftest import BOT, BOT_PW
from tests.adapters.mail.servers import Dovecot, MailServer


@pytest.fixture
def smtp(dovecot: Dovecot) -> Iterator[MailServer]:
    server = MailServer(dovecot, {BOT: BOT_PW}).start()
    yield server
    server.stop()


def section(dovecot: Dovecot, smtp: MailServer, password: str = BOT_PW) -> EmailConfig:
    return EmailConfig(
        enabled=True,
        address=BOT,
        password=password,
        imap_host="127.0.0.1",
        imap_port=dovecot.port,
        imap_security="none",
        smtp_host="127.0.0.1",
        smtp_port=smtp.port,
        smtp_security="none",
        timeout_s=5,
    )


def test_valid_credentials_log_in_to_both(dovecot: Dovecot, smtp: MailServer) -> None:
    with httpx.Client() as http:
        assert probe(section(dovecot, smtp), http) == f"imap and smtp logins ok: {BOT}"
        elsewhere = section(dovecot, smtp).model_copy(update={"sent_folder": "Outbox"})
        assert probe(elsewhere, http) == (
            f"imap and smtp logins ok: {BOT}; no folder 'Outbox': the bot's own copies stay "
            "in the inbox"
        )


def test_a_refused_login_says_which_server_refused(dovecot: Dovecot, smtp: MailServer) -> None:
    with httpx.Client() as http:
        with pytest.raises(ProbeFailed, match="imap login refused") as imap:
            probe(section(dovecot, smtp, password="wrong"), http)
        assert "wrong" not in str(imap.value)
        smtp.users[BOT] = "another"  # the SMTP server alone refuses it now
        with pytest.raises(ProbeFailed, match="smtp login refused"):
            probe(section(dovecot, smtp), http)
        dovecot.stop()
        with pytest.raises(ProbeFailed, match="unreachable"):
            probe(section(dovecot, smtp), http)
