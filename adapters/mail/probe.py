"""`hermes doctor`'s check of the email account: an IMAP LOGIN and an SMTP EHLO and AUTH
with the configured credentials (the standard library's clients: the doctor is synchronous)."""

from __future__ import annotations

import imaplib
import smtplib
import ssl

import httpx

from adapters.mail.settings import EmailConfig
from hermes_gateway.platforms import ProbeFailed


def probe(section: EmailConfig, http: httpx.Client) -> str:
    """The verdict "imap and smtp logins ok: <login>" (and whether the sent folder is
    missing), or `ProbeFailed` saying which server refused."""
    has_sent = _imap(section)
    _smtp(section)
    verdict = f"imap and smtp logins ok: {section.login}"
    if not has_sent:
        verdict += f"; no folder {section.sent_folder!r}: the bot's own copies stay in the inbox"
    return verdict


def _imap(section: EmailConfig) -> bool:
    """Log in and open the mailbox; whether the sent folder exists (or none is wanted)."""
    timeout = section.timeout_s
    try:
        if section.imap_security == "tls":
            context = ssl.create_default_context()
            conn: imaplib.IMAP4 = imaplib.IMAP4_SSL(
                section.imap_host, section.imap_port, ssl_context=context, timeout=timeout
            )
        else:
            conn = imaplib.IMAP4(section.imap_host, section.imap_port, timeout=timeout)
    except (OSError, imaplib.IMAP4.error) as exc:
        raise ProbeFailed(
            f"imap {section.imap_host}:{section.imap_port} unreachable: {exc}"
        ) from None
    try:
        conn.login(section.login, section.password)
        typ, _ = conn.select(section.mailbox, readonly=True)
        if typ != "OK":
            raise ProbeFailed(f"imap: no mailbox {section.mailbox!r}")
        if not section.sent_folder:
            return True
        typ, _ = conn.select(section.sent_folder, readonly=True)
        return typ == "OK"
    except imaplib.IMAP4.error as exc:
        raise ProbeFailed(f"imap login refused: {exc}") from None
    except OSError as exc:
        raise ProbeFailed(f"imap: {exc}") from None
    finally:
        try:
            conn.logout()
        except (OSError, imaplib.IMAP4.error):
            pass


def _smtp(section: EmailConfig) -> None:
    timeout = section.timeout_s
    host, port = section.smtp_host, section.smtp_port
    try:
        if section.smtp_security == "tls":
            context = ssl.create_default_context()
            conn: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
        else:
            conn = smtplib.SMTP(host, port, timeout=timeout)
    except (OSError, smtplib.SMTPException) as exc:
        raise ProbeFailed(f"smtp {host}:{port} unreachable: {exc}") from None
    try:
        conn.ehlo()
        if section.smtp_security == "starttls":
            conn.starttls(context=ssl.create_default_context())
            conn.ehlo()
        conn.login(section.login, section.password)
    except smtplib.SMTPAuthenticationError as exc:
        raise ProbeFailed(f"smtp login refused: {exc.smtp_code}") from None
    except (OSError, smtplib.SMTPException) as exc:
        raise ProbeFailed(f"smtp: {exc}") from None
    finally:
        try:
            conn.quit()
        except (OSError, smtplib.SMTPException):
            pass
