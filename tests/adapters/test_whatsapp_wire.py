"""WhatsApp's wire pieces on their own: Graph's error codes mapped to retry, wait or give up;
the webhook signature over the raw bytes; change payloads taken apart, odd shapes skipped."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from adapters.whatsapp.graph import WindowClosedError, graph_error
from adapters.whatsapp.inbound import normalize, parse_delivery
from adapters.whatsapp.webhook import signature_error
from hermes_gateway.platforms import (
    AdapterAuthError,
    PermanentAdapterError,
    RateLimitedError,
    TransientAdapterError,
)
from tests.fakes.whatsapp import PHONE_NUMBER_ID, FakeWhatsApp


def body(code: int) -> dict[str, Any]:
    return {"error": {"message": f"(#{code}) x", "type": "OAuthException", "code": code}}


@pytest.mark.parametrize(
    ("status", "code", "kind", "wait"),
    [
        (400, 130429, RateLimitedError, 2.0),
        (400, 131056, RateLimitedError, 6.0),
        (400, 80007, RateLimitedError, 60.0),
        (401, 190, AdapterAuthError, None),
        (400, 131047, WindowClosedError, None),
        (400, 131026, PermanentAdapterError, None),
        (500, 131000, TransientAdapterError, None),
        (503, 2, TransientAdapterError, None),
        (502, 0, TransientAdapterError, None),
        (400, 100, PermanentAdapterError, None),
    ],
)
def test_graph_codes_become_the_gateways_errors(
    status: int, code: int, kind: type, wait: float | None
) -> None:
    error = graph_error(status, body(code) if code else "<html>bad gateway</html>")
    assert type(error) is kind
    if wait is not None:
        assert isinstance(error, RateLimitedError) and error.retry_after == wait


def test_the_signature_is_checked_on_the_raw_bytes() -> None:
    raw = b'{"object": "whatsapp_business_account"}'
    good = "sha256=" + hmac.new(b"secret", raw, hashlib.sha256).hexdigest()
    assert signature_error(good, raw, "secret") == ""
    assert signature_error(good.upper().replace("SHA256", "sha256"), raw, "secret") == ""
    assert signature_error(good, raw + b" ", "secret") == "bad signature"  # same JSON, other bytes
    assert signature_error(good, raw, "other") == "bad signature"
    assert signature_error(None, raw, "secret") == "no signature"
    assert signature_error("sha1=" + "0" * 40, raw, "secret") == "malformed signature"
    assert signature_error("sha256=\u00e9", raw, "secret") == "malformed signature"


def test_a_delivery_is_taken_apart_and_odd_parts_skipped() -> None:
    fake = FakeWhatsApp()
    payload = fake.message(
        "15550001111", "audio", {"id": "M1", "mime_type": "audio/ogg; codecs=opus", "voice": True}
    )
    value = payload["entry"][0]["changes"][0]["value"]
    value["statuses"] = [
        {
            "id": "wamid.A",
            "status": "delivered",
            "recipient_id": "1",
            "biz_opaque_callback_data": "k",
        },
        {
            "id": "wamid.B",
            "status": "failed",
            "errors": [{"code": 131026, "title": "Undeliverable"}],
        },
        {"status": "sent"},
    ]
    value["messages"].append({"from": "1", "id": "w", "type": "reaction", "reaction": {}})
    delivery = parse_delivery(payload, PHONE_NUMBER_ID)
    assert [(s.wamid, s.status, s.key, s.error) for s in delivery.statuses] == [
        ("wamid.A", "delivered", "k", ""),
        ("wamid.B", "failed", "", "131026: Undeliverable"),
    ]
    voice, profile = delivery.messages[0]
    inbound = normalize(voice, profile)
    assert inbound is not None
    [attachment] = inbound.event.attachments
    assert (attachment.kind, attachment.file_id, attachment.mime_type) == (
        "voice",
        "M1",
        "audio/ogg",
    )
    assert inbound.event.text == f"[attached voice: {attachment.name} (audio/ogg)]"
    assert inbound.event.user_name == "User 1111"
    assert normalize(*delivery.messages[1]) is None  # a reaction taken back
    other = parse_delivery(payload, "another-number")
    assert other.foreign == 1 and other.messages == () and other.statuses == ()


def test_reactions_and_replies_keep_what_they_point_at() -> None:
    fake = FakeWhatsApp()
    reaction = {"message_id": "wamid.OUT1", "emoji": "\U0001f44d"}
    [(message, name)] = parse_delivery(
        fake.message("1", "reaction", reaction), PHONE_NUMBER_ID
    ).messages
    inbound = normalize(message, name)
    assert inbound is not None
    assert inbound.event.reply_to == "wamid.OUT1"
    assert inbound.event.text == "[reacted \U0001f44d to an earlier message]"
    quoted = fake.message(
        "1", "text", {"body": "and this?"}, context={"from": "x", "id": "wamid.Q"}
    )
    [(message, name)] = parse_delivery(quoted, PHONE_NUMBER_ID).messages
    replied = normalize(message, name)
    assert replied is not None and replied.event.reply_to == "wamid.Q"
    assert replied.event.chat_type == "dm" and replied.event.session_key == "whatsapp:dm:1"
