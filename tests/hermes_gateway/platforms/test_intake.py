"""`Intake`: the one way a platform's message reaches `AdapterHost.submit` (the session setting
read at each message, the adapter's screen, the sender, what the platform may confirm)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from hermes_gateway.config import Config
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.adapter import SubmitOutcome
from hermes_gateway.platforms.intake import BotIdentity, Inbound, Intake, tolerant
from tests.harness import make_config

GROUP: dict[str, Any] = {"platform": "toy", "chat_type": "group", "chat_id": "g1", "user_id": "u1"}


class Host:
    """The part of `AdapterHost` that intake uses, recording each submit."""

    def __init__(self, config: Config, outcome: SubmitOutcome = "accepted") -> None:
        self.config = config
        self.outcome = outcome
        self.submitted: list[tuple[MessageEvent, dict[str, Any]]] = []

    async def submit(self, event: MessageEvent, **how: Any) -> SubmitOutcome:
        self.submitted.append((event, how))
        return self.outcome


def event(per_user: bool = True) -> MessageEvent:
    return MessageEvent.create(**GROUP, message_id="m1", text="hi", per_user=per_user)


def intake(tmp_path: Path, per_user: bool = True, **host: Any) -> tuple[Intake, Host]:
    config = make_config(tmp_path, None, runner={"group_sessions_per_user": per_user})
    fake = Host(config, **host)
    return Intake(fake, "toy"), fake  # type: ignore[arg-type]


async def test_the_message_is_submitted_with_its_sender_and_the_session_setting(
    tmp_path: Path,
) -> None:
    take, host = intake(tmp_path, per_user=False)
    read: list[bool] = []

    def normalize(per_user: bool) -> Inbound:
        read.append(per_user)
        return Inbound(event(per_user), from_bot=True)

    taken = await take.take(normalize, durable=True)
    [(submitted, how)] = host.submitted
    assert read == [False]
    assert submitted.session_key == "toy:group:g1"  # shared: the setting in force was used
    assert how == {"durable": True, "sender": "bot", "admitted": None}
    assert (taken.event, taken.outcome, taken.keep) == (submitted, "accepted", False)


async def test_nothing_to_take_is_not_submitted(tmp_path: Path) -> None:
    take, host = intake(tmp_path)
    taken = await take.take(lambda per_user: None)
    assert host.submitted == [] and (taken.event, taken.outcome, taken.keep) == (None, None, False)


async def test_the_screen_can_change_or_drop_the_event(tmp_path: Path) -> None:
    take, host = intake(tmp_path)

    async def addressed(ev: MessageEvent) -> MessageEvent:
        return replace(ev, mentioned=True)

    async def drop(ev: MessageEvent) -> None:
        return None

    taken = await take.take(lambda per_user: Inbound(event()), screen=addressed)
    assert taken.event is not None and taken.event.mentioned and host.submitted[0][0].mentioned
    dropped = await take.take(lambda per_user: Inbound(event()), screen=drop)
    assert dropped.outcome is None and len(host.submitted) == 1


@pytest.mark.parametrize("outcome", ["unavailable", "closed"])
async def test_a_message_the_core_did_not_take_is_kept_by_the_platform(
    tmp_path: Path, outcome: SubmitOutcome
) -> None:
    """The store could not write it, or the gateway is stopping: confirmed to the platform
    (acked, offset moved) it would be lost; kept, it is offered again."""
    take, _ = intake(tmp_path, outcome=outcome)
    taken = await take.take(lambda per_user: Inbound(event(), from_self=True), durable=True)
    assert taken.keep and taken.outcome == outcome


def test_the_bot_knows_itself_by_id_in_any_form() -> None:
    me = BotIdentity("123", "hermes_bot")
    assert me.is_me(123) and me.is_me("123") and not me.is_me(124)
    assert not BotIdentity("").is_me("")  # not connected yet: nobody is the bot
    assert Inbound(event(), from_self=True, from_bot=True).sender == "self"
    assert Inbound(event(), from_bot=True).sender == "bot"
    assert Inbound(event()).sender == "user"


def test_a_malformed_sdk_object_is_logged_and_ignored_other_bugs_are_not() -> None:
    def missing() -> Inbound:
        raise AttributeError("'Message' object has no attribute 'mentions'")

    def bug() -> Inbound:
        raise RuntimeError("a bug")

    log = structlog.get_logger("test")
    with capture_logs() as logs:
        assert tolerant(missing, log, "toy.malformed", message_id="m1") is None
    assert [(e["event"], e["message_id"]) for e in logs] == [("toy.malformed", "m1")]
    assert "mentions" in logs[0]["error"]
    with pytest.raises(RuntimeError):
        tolerant(bug, log, "toy.malformed")
