"""`build_session_key` and the frozen event shapes that cross every seam."""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_gateway.events import (
    Attachment,
    Chat,
    MessageEvent,
    OutboundMessage,
    build_session_key,
)
from hermes_gateway.store.store import event_from_json
from tests.source_tree import parse


class TestSessionKey:
    def test_dm_is_keyed_by_chat(self) -> None:
        assert build_session_key("telegram", "dm", "42", user_id="42") == "telegram:dm:42"

    def test_group_is_per_user_by_default(self) -> None:
        key = build_session_key("discord", "group", "g1", user_id="u7")
        assert key == "discord:group:g1:u7"

    def test_group_shared_when_not_per_user(self) -> None:
        key = build_session_key("discord", "group", "g1", user_id="u7", per_user=False)
        assert key == "discord:group:g1"

    def test_channel_is_per_user_by_default(self) -> None:
        assert build_session_key("slack", "channel", "C1", user_id="U1") == "slack:channel:C1:U1"
        shared = build_session_key("slack", "channel", "C1", user_id="U1", per_user=False)
        assert shared == "slack:channel:C1"

    def test_thread_is_shared_by_its_participants(self) -> None:
        alice = build_session_key("slack", "thread", "C1", "171.5", "alice")
        bob = build_session_key("slack", "thread", "C1", "171.5", "bob")
        assert alice == bob == "slack:thread:C1:171.5"

    def test_telegram_forum_topic_is_its_own_shared_session(self) -> None:
        topic = build_session_key("telegram", "group", "-1001", "12", "u1")
        other_user = build_session_key("telegram", "group", "-1001", "12", "u2")
        general = build_session_key("telegram", "group", "-1001", None, "u1")
        assert topic == other_user == "telegram:group:-1001:12"
        assert general == "telegram:group:-1001:u1"

    def test_numeric_ids_are_stringified(self) -> None:
        assert build_session_key("telegram", "group", -100, 5, 9) == "telegram:group:-100:5"  # type: ignore[arg-type]

    def test_unknown_chat_type_raises(self) -> None:
        with pytest.raises(ValueError, match="unknown chat_type 'supergroup'"):
            build_session_key("telegram", "supergroup", "1")


def _event(**overrides: object) -> MessageEvent:
    fields: dict[str, object] = {
        "platform": "telegram",
        "chat_type": "group",
        "chat_id": "-1001",
        "user_id": "u1",
        "message_id": "m1",
        "text": "hi",
    }
    fields.update(overrides)
    return MessageEvent.create(**fields)  # type: ignore[arg-type]


class TestMessageEvent:
    @pytest.mark.parametrize(
        ("chat_type", "thread_id", "per_user"),
        [
            ("dm", None, True),
            ("group", None, True),
            ("group", None, False),
            ("group", "12", True),
            ("channel", None, True),
            ("thread", "t9", True),
        ],
    )
    def test_create_uses_build_session_key(
        self, chat_type: str, thread_id: str | None, per_user: bool
    ) -> None:
        event = _event(chat_type=chat_type, thread_id=thread_id, per_user=per_user)
        expected = build_session_key(
            "telegram", chat_type, "-1001", thread_id, "u1", per_user=per_user
        )
        assert event.session_key == expected

    def test_create_normalizes_ids_and_passes_extras(self) -> None:
        photo = Attachment(kind="image", file_id="f1")
        event = _event(chat_id=-1001, user_id=7, message_id=99, thread_id=12, mentioned=True,
                       attachments=(photo,), user_name="Ada")  # fmt: skip
        assert (event.chat_id, event.user_id, event.message_id, event.thread_id) == (
            "-1001",
            "7",
            "99",
            "12",
        )
        assert event.mentioned is True
        assert event.attachments == (photo,)
        assert event.user_name == "Ada"
        assert event.received_at > 0

    def test_empty_thread_id_becomes_none(self) -> None:
        event = _event(thread_id="")
        assert event.thread_id is None
        assert event.session_key == "telegram:group:-1001:u1"

    def test_unknown_chat_type_raises(self) -> None:
        with pytest.raises(ValueError, match="chat_type"):
            _event(chat_type="private")

    def test_events_are_frozen(self) -> None:
        event = _event()
        with pytest.raises(dataclasses.FrozenInstanceError):
            event.text = "changed"  # type: ignore[misc]
        out = OutboundMessage.to(event, "hello")
        with pytest.raises(dataclasses.FrozenInstanceError):
            out.text = "changed"  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            Attachment(kind="image").path = "/tmp/x"  # type: ignore[misc]

    def test_reply_context_survives_the_inbox_and_stays_out_of_repr(self) -> None:
        """It may hold a credential (a Discord interaction token); rows written before it
        existed load with none."""
        event = dataclasses.replace(_event(), reply_context='{"token": "s3cr3t-token"}')
        assert "s3cr3t-token" not in repr(event)
        assert event_from_json(json.dumps(dataclasses.asdict(event))).reply_context == (
            event.reply_context
        )
        old_row = dataclasses.asdict(_event())
        del old_row["reply_context"]
        assert event_from_json(json.dumps(old_row)).reply_context == ""

    @pytest.mark.parametrize(
        "make",
        [_event, lambda: OutboundMessage.to(_event(), "x"), lambda: Attachment(kind="image")],
        ids=["MessageEvent", "OutboundMessage", "Attachment"],
    )
    def test_events_are_slotted(self, make: Callable[[], object]) -> None:
        instance = make()
        assert "__slots__" in type(instance).__dict__
        assert not hasattr(instance, "__dict__")
        with pytest.raises(AttributeError):
            object.__setattr__(instance, "extra_attribute", 1)


class TestOutboundMessage:
    def test_to_settles_the_event_where_it_came_from(self) -> None:
        event = _event(chat_type="thread", chat_id="C1", thread_id="171.5", message_id="m42")
        out = OutboundMessage.to(event, "answer", kind="notice", run_id="r1")
        assert out.answers == ("m42",)
        assert out.reply_to == "m42"
        assert (out.platform, out.chat_id, out.thread_id) == ("telegram", "C1", "171.5")
        assert out.session_key == event.session_key
        assert (out.text, out.kind, out.run_id) == ("answer", "notice", "r1")

    def test_reply_to_is_the_first_answer(self) -> None:
        event = _event(chat_type="thread", chat_id="C1", thread_id="171.5", message_id="m42")
        out = OutboundMessage.to(event, "merged", answers=("a", "b"))
        assert out.reply_to == "a"
        assert OutboundMessage.to(event, "notice", "notice", answers=()).reply_to is None

    def test_a_chat_with_no_message_gets_a_message_that_settles_nothing(self) -> None:
        out = OutboundMessage.to(Chat("telegram", "555"), "welcome", "notice")
        assert (out.platform, out.chat_id, out.thread_id, out.session_key) == (
            "telegram",
            "555",
            None,
            "",
        )
        assert (out.answers, out.kind, out.text) == ((), "notice", "welcome")

    def test_the_local_api_fields_pass_through(self) -> None:
        out = OutboundMessage.to(
            _event(), "x", "error", outcome="failed", error="boom", usage={"total_tokens": 3}
        )
        assert (out.outcome, out.error, dict(out.usage)) == ("failed", "boom", {"total_tokens": 3})
        assert OutboundMessage.to(_event(), "x", skip_parts=2).skip_parts == 2

    def test_product_code_builds_outbound_messages_only_through_to(self) -> None:
        """One constructor: a message built field by field elsewhere is how fields drifted."""
        root = Path(__file__).resolve().parents[2]
        offenders = []
        for package in ("hermes_gateway", "adapters"):
            for path in sorted((root / package).rglob("*.py")):
                for node in ast.walk(parse(path)):
                    if not isinstance(node, ast.Call):
                        continue
                    name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if name == "OutboundMessage":
                        offenders.append(f"{path.relative_to(root)}:{node.lineno}")
        assert offenders == []
