"""The email section's own checks: an enabled section needs its account, its servers and a
trusted authserv-id (unless authentication is explicitly turned off for a trusted relay)."""

from __future__ import annotations

from adapters.mail.settings import EmailConfig, email_problems


def test_an_enabled_section_names_what_it_lacks() -> None:
    keys = [key for key, _ in email_problems(EmailConfig(enabled=True))]
    assert keys == ["address", "imap_host", "smtp_host", "trusted_authserv_ids"]


def test_a_trusted_relay_needs_no_authserv_id_only_when_said_so() -> None:
    base = {"enabled": True, "address": "b@x.test", "imap_host": "i", "smtp_host": "s"}
    assert [k for k, _ in email_problems(EmailConfig(**base))] == ["trusted_authserv_ids"]
    assert email_problems(EmailConfig(**base, require_authentication=False)) == []
    assert email_problems(EmailConfig(**base, trusted_authserv_ids=("MX.x.test",))) == []


def test_addresses_and_authserv_ids_are_compared_folded() -> None:
    section = EmailConfig(allowed_users=[" Alice@Corp.TEST"], trusted_authserv_ids=["MX.Bot.test"])
    assert section.allowed_users == ("alice@corp.test",)
    assert section.trusted_authserv_ids == ("mx.bot.test",)
