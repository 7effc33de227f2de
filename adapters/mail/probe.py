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
    """ "imap and smtp logins ok: <login>", or `ProbeFailed` saying which server refused."""
    _imap(section)
    _smtp(section)
    return f"imap and smtp logins ok: {section.login}"


def _imap(section: EmailConfig) -> None:
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
