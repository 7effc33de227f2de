"""Fuzzing WhatsApp's intake: random and mutated webhook deliveries are taken apart or skipped,
never raised, and every message accepted is a well-formed `MessageEvent`."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from adapters.whatsapp.inbound import normalize, parse_delivery
from tests.fakes.whatsapp import PHONE_NUMBER_ID, FakeWhatsApp
from tests.fuzz.strategies import JSON, examples, mutated

FUZZ = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def bases() -> list[dict[str, Any]]:
    fake = FakeWhatsApp()
    sender = "15550001111"
    status = {"id": "wamid.X", "status": "sent", "recipient_id": sender}
    return [
        fake.message(sender, "text", {"body": "hello"}, context={"from": "1", "id": "wamid.Q"}),
        fake.message(sender, "image", {"id": "M1", "mime_type": "image/jpeg", "caption": "c"}),
        fake.message(sender, "document", {"id": "M2", "filename": "a.pdf", "mime_type": "x"}),
        fake.message(sender, "audio", {"id": "M3", "mime_type": "audio/ogg", "voice": True}),
        fake.message(sender, "reaction", {"message_id": "wamid.O", "emoji": "\U0001f44d"}),
        fake.envelope({"statuses": [{**status, "biz_opaque_callback_data": "k"}]}),
        fake.envelope({"errors": [{"code": 131000, "title": "x"}]}),
    ]


def wrong_types() -> list[dict[str, Any]]:
    """Every nested field of a delivery with a value of the wrong type, once each."""
    fake = FakeWhatsApp()
    odd: list[dict[str, Any]] = []
    for key, junk in [
        ("context", "x"),
        ("text", "flat"),
        ("image", ["M1"]),
        ("reaction", "x"),
        ("timestamp", 12),
        ("from", 15550001111),
    ]:
        kind = key if key in ("text", "image", "reaction") else "text"
        payload = fake.message("1", kind, {"body": "b"})
        payload["entry"][0]["changes"][0]["value"]["messages"][0][key] = junk
        odd.append(payload)
    for key in ("contacts", "metadata", "messages", "statuses", "errors"):
        odd.append(fake.envelope({key: "x"}))
        odd.append(fake.envelope({key: [None, 1, "x", {"profile": "x", "wa_id": "1"}]}))
    return odd


@FUZZ
@given(raw=st.sampled_from(bases()).flatmap(mutated) | JSON)
@example(raw=wrong_types())
def test_any_delivery_is_taken_apart_or_skipped_never_raises(raw: Any) -> None:
    for payload in raw if isinstance(raw, list) and raw and isinstance(raw[0], dict) else [raw]:
        check(payload)


def check(raw: Any) -> None:
    delivery = parse_delivery(raw, PHONE_NUMBER_ID)
    for status in delivery.statuses:
        assert all(isinstance(v, str) for v in (status.wamid, status.status, status.key))
    for message, profile in delivery.messages:
        inbound = normalize(message, profile)
        if inbound is None:
            continue
        event = inbound.event
        assert event.platform == "whatsapp" and event.chat_type == "dm"
        assert event.chat_id and event.message_id and isinstance(event.text, str)
        assert event.session_key == f"whatsapp:dm:{event.chat_id}"
        assert all(a.file_id and a.name for a in event.attachments)
