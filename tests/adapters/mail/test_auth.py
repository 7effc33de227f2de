"""The sender checks against the forging attempts docs/platforms.md lists: a mail is let in
only when its one From address is vouched for by the topmost Authentication-Results header of
a trusted authserv-id, with a passing DKIM, SPF or DMARC result aligned with its domain."""

from __future__ import annotations

import pytest

from adapters.mail.auth import aligned, authenticated, sender
from adapters.mail.inbound import automatic, headers_of

TRUSTED = ("mx.bot.test",)
PASS = "mx.bot.test; dkim=pass header.d=corp.test; spf=none"


def mail(from_: str | list[str], *results: str, extra: str = "") -> bytes:
    froms = [from_] if isinstance(from_, str) else from_
    head = "".join(f"Authentication-Results: {r}\r\n" for r in results)
    head += "".join(f"From: {f}\r\n" for f in froms)
    return f"{head}{extra}Subject: hi\r\nMessage-ID: <m@corp.test>\r\n\r\nhello\r\n".encode()


def verdict(raw: bytes) -> tuple[str | None, bool]:
    head = headers_of(raw)
    who = sender(head)
    return who, who is not None and authenticated(head, who, TRUSTED).ok


def test_a_dkim_pass_from_the_trusted_server_for_the_from_domain_is_admitted() -> None:
    assert verdict(mail("Alice <Alice@Corp.test>", PASS)) == ("alice@corp.test", True)
    spf = "mx.bot.test; spf=pass smtp.mailfrom=bounces@corp.test; dkim=none"
    assert verdict(mail("alice@corp.test", spf)) == ("alice@corp.test", True)
    dmarc = "mx.bot.test 1; dmarc=pass header.from=corp.test"
    assert verdict(mail("alice@corp.test", dmarc)) == ("alice@corp.test", True)


@pytest.mark.parametrize(
    "results",
    [
        (),  # no Authentication-Results at all
        ("mx.evil.test; dkim=pass header.d=corp.test",),  # an authserv-id nobody trusts
        ("mx.bot.test; dkim=pass header.d=evil.test",),  # a pass, for another domain
        ("mx.bot.test; dkim=fail header.d=corp.test; spf=softfail smtp.mailfrom=corp.test",),
        ("mx.bot.test; dkim=pass header.d=test",),  # a bare top-level name aligns with nothing
        ("mx.bot.test; dkim=fail (dkim=pass header.d=corp.test) header.d=corp.test",),
        # the sender's own header below the trusted one: only the topmost counts
        ("mx.bot.test; dkim=fail header.d=corp.test", PASS),
        ("mx.bot.test; none", PASS),
    ],
)
def test_forged_or_failing_results_are_refused(results: tuple[str, ...]) -> None:
    assert verdict(mail("alice@corp.test", *results)) == ("alice@corp.test", False)


@pytest.mark.parametrize(
    ("from_", "who"),
    [
        ("alice@corp.test, boss@corp.test", None),  # two addresses in one From
        (["alice@corp.test", "boss@corp.test"], None),  # two From headers
        ('"boss@corp.test" <evil@x.test>', "evil@x.test"),  # the display name is not the sender
        # the standard library's two parsers read these two differently (one of them as
        # boss@corp.test): a From the parsers disagree on is refused
        ("=?utf-8?q?boss@corp.test?= <evil@x.test>", None),
        ("boss@corp.test <evil@x.test>", None),
        ("=?utf-8?q?boss=40corp.test?= <evil@x.test>", "evil@x.test"),
        ("=?utf-8?b?Ym9zc0Bjb3JwLnRlc3Q=?=", None),  # an encoded word where the address goes
        ("<=?utf-8?q?boss=40corp.test?=>", None),
        ("undisclosed-recipients:;", None),
        ("", None),
    ],
)
def test_the_sender_is_the_one_address_never_a_display_name(
    from_: str | list[str], who: str | None
) -> None:
    got, admitted = verdict(mail(from_, PASS))
    assert got == who
    assert not admitted  # none of these is corp.test's vouched-for sender


def test_an_encoded_display_name_is_fine() -> None:
    raw = mail("=?utf-8?q?J=C3=B6rg?= <joerg@corp.test>", PASS)
    assert verdict(raw) == ("joerg@corp.test", True)


def test_an_8_bit_display_name_is_fine_an_8_bit_address_is_refused() -> None:
    # the raw bytes of an SMTPUTF8 header: an address with them could not be stored as a key
    assert verdict(mail("Jörg <joerg@corp.test>", PASS)) == ("joerg@corp.test", True)
    assert verdict(mail("jörg@corp.test", PASS)) == (None, False)


def test_alignment_takes_subdomains_both_ways_and_nothing_else() -> None:
    assert aligned("mail.corp.test", "corp.test")
    assert aligned("corp.test", "mail.corp.test")
    assert not aligned("corp.test", "notcorp.test")
    assert not aligned("corp.test", "test")


@pytest.mark.parametrize(
    "header",
    [
        "Auto-Submitted: auto-replied",
        "Auto-Submitted: auto-generated",
        "Precedence: bulk",
        "Precedence: list",
        "Precedence: junk",
        "List-Id: <team.lists.corp.test>",
        "Return-Path: <>",
    ],
)
def test_automatic_mail_is_recognised(header: str) -> None:
    assert automatic(headers_of(mail("alice@corp.test", PASS, extra=header + "\r\n")))


def test_a_person_s_mail_and_a_mailer_daemon_s() -> None:
    assert automatic(headers_of(mail("alice@corp.test", extra="Auto-Submitted: no\r\n"))) == ""
    assert automatic(headers_of(mail("MAILER-DAEMON@corp.test")))
