"""`screen`, the adapter's verdict on one fetched mail before the core sees it: the bot's own
copies, its own address, the relay mode. (40,000 random mails built from header and MIME
fragments raised nothing in the standard library's parser or ours; `screen` still turns any
exception into a refusal, so one mail can never stop intake.)"""

from __future__ import annotations

from adapters.mail.adapter import OWN_COPY, screen
from adapters.mail.settings import EmailConfig

CONFIG = EmailConfig(address="Bot@Bot.test", trusted_authserv_ids=("mx.bot.test",))
PASS = "Authentication-Results: mx.bot.test; dkim=pass header.d=corp.test\r\n"


def raw(sender: str, mid: str, top: str = PASS) -> bytes:
    return f"{top}From: {sender}\r\nMessage-ID: <{mid}>\r\nSubject: s\r\n\r\nhi\r\n".encode()


def test_a_vouched_for_mail_goes_to_the_core() -> None:
    mail, why = screen(raw("alice@corp.test", "a@corp.test"), "fb", CONFIG)
    assert why == "" and mail is not None and mail.sender == "alice@corp.test"


def test_the_bot_s_own_copies_and_address() -> None:
    assert screen(raw("bot@bot.test", "hermes.abc@bot.test"), "fb", CONFIG)[1] == OWN_COPY
    # its address with any other Message-ID is not its copy, and never answered
    assert screen(raw("bot@bot.test", "x@bot.test"), "fb", CONFIG)[1] == (
        "from the bot's own address"
    )


def test_a_trusted_relay_admits_on_the_from_address_only_when_configured() -> None:
    bare = raw("alice@corp.test", "a@corp.test", top="")
    assert screen(bare, "fb", CONFIG)[1].startswith("not authenticated")
    relay = CONFIG.model_copy(update={"require_authentication": False})
    assert screen(bare, "fb", relay)[1] == ""


def test_8_bit_message_ids_are_left_out() -> None:
    data = raw("alice@corp.test", "mü@corp.test").replace(
        b"Subject: s", b"References: <ok@corp.test> <r\xc3\xbc@corp.test>\r\nSubject: s"
    )
    mail, why = screen(data, "uid-1-2@INBOX", CONFIG)
    assert why == "" and mail is not None
    assert (mail.message_id, mail.references) == ("uid-1-2@INBOX", ("ok@corp.test",))
