"""Email's ``platforms.email:`` config section (pure data: no IMAP or SMTP library imported)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from hermes_gateway.platforms import MEDIA_MAX_BYTES, PlatformSection

Security = Literal["tls", "starttls", "none"]


class EmailConfig(PlatformSection):
    address: str = ""  # the bot's own address: From of its replies, the blind self-copy's RCPT
    username: str = ""  # the IMAP and SMTP login; the address when empty
    password: str = ""
    from_name: str = "Hermes"
    imap_host: str = ""
    imap_port: int = Field(993, ge=1, le=65535)
    imap_security: Literal["tls", "none"] = "tls"  # "none": a loopback or trusted-LAN server
    smtp_host: str = ""
    smtp_port: int = Field(465, ge=1, le=65535)
    smtp_security: Security = "tls"
    mailbox: str = "INBOX"
    sent_folder: str = "Sent"  # where the bot's own copies go ("" leaves them read in the mailbox)
    idle: bool = True  # IMAP IDLE when the server has it; polling otherwise
    poll_interval_s: float = Field(60.0, gt=0)  # without IDLE, and the IDLE renewal at most
    # the receiving server's authserv-ids whose Authentication-Results are believed
    trusted_authserv_ids: tuple[str, ...] = ()
    # admit mail without a passing DKIM/SPF result: only for a trusted internal relay
    require_authentication: bool = True
    message_limit: int = Field(50_000, ge=200, le=1_000_000)  # characters of one reply mail
    max_mail_bytes: int = Field(30 * 1024 * 1024, ge=1024)  # larger mails are not read
    media_max_bytes: int = Field(MEDIA_MAX_BYTES, ge=0)
    # after a crash, how long the sent-check waits for the self-copy of a reply in doubt
    sent_check_wait_s: float = Field(10.0, ge=0)
    timeout_s: float = Field(30.0, gt=0)  # one IMAP command or SMTP exchange

    @field_validator("allowed_users", mode="after")
    @classmethod
    def _addresses_folded(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # addresses are compared folded to lower case (see `auth.fold`)
        return tuple(v.strip().lower() for v in value)

    @field_validator("trusted_authserv_ids", mode="after")
    @classmethod
    def _ids_folded(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(v.strip().lower() for v in value)

    @property
    def login(self) -> str:
        return self.username or self.address


def email_problems(section: EmailConfig) -> list[tuple[str, str]]:
    """An enabled section needs its account and servers, and a trusted authserv-id unless the
    operator turned authentication off for a trusted relay."""
    problems = [
        (key, "must be set")
        for key in ("address", "imap_host", "smtp_host")
        if not getattr(section, key)
    ]
    if section.address and "@" not in section.address:
        problems.append(("address", "must be an email address"))
    if section.require_authentication and not section.trusted_authserv_ids:
        problems.append(
            (
                "trusted_authserv_ids",
                "must name the receiving server's authserv-id (or set "
                "require_authentication: false for a trusted internal relay)",
            )
        )
    return problems
