"""Sending one mail over SMTP (aiosmtplib), to its reader and, blind, to the bot's own address:
that self-copy is delivered exactly when the server takes the mail, so the bot's mailbox is the
record the sent-check reads (docs/exactly-once.md). Failures become the gateway's errors."""

from __future__ import annotations

from email.message import EmailMessage

import aiosmtplib

from adapters.mail.settings import EmailConfig
from hermes_gateway.platforms import (
    AdapterAuthError,
    PermanentAdapterError,
    TransientAdapterError,
)


class MaybeSentError(TransientAdapterError):
    """The connection failed after it was made (a timeout, a drop): the server may have taken
    the mail before its answer was lost, so it is looked for before it is sent again."""


async def send_mail(config: EmailConfig, message: EmailMessage, to: str) -> None:
    """Send ``message`` to ``to`` and a blind copy to the bot; 5xx answers are permanent."""
    try:
        await aiosmtplib.send(
            message,
            sender=config.address,
            recipients=[to, config.address],
            hostname=config.smtp_host,
            port=config.smtp_port,
            username=config.login or None,
            password=config.password or None,
            use_tls=config.smtp_security == "tls",
            start_tls=config.smtp_security == "starttls",
            timeout=config.timeout_s,
        )
    except aiosmtplib.SMTPAuthenticationError as exc:
        raise AdapterAuthError(f"smtp: login refused: {exc.code} {exc.message}") from exc
    except aiosmtplib.SMTPResponseException as exc:
        error = PermanentAdapterError if 500 <= exc.code < 600 else TransientAdapterError
        raise error(f"smtp: {exc.code} {exc.message}") from exc
    except aiosmtplib.SMTPRecipientsRefused as exc:
        raise PermanentAdapterError(f"smtp: recipients refused: {exc.recipients}") from exc
    except aiosmtplib.SMTPConnectError as exc:  # never connected: nothing was taken
        raise TransientAdapterError(f"smtp: {exc!r}") from exc
    except (aiosmtplib.SMTPTimeoutError, aiosmtplib.SMTPServerDisconnected) as exc:
        raise MaybeSentError(f"smtp: {exc!r}") from exc
    except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
        raise TransientAdapterError(f"smtp: {exc!r}") from exc
