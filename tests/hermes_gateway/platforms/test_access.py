"""Access rules shared by the adapters: allowlists, mention gating, bots, DM pairing."""

from __future__ import annotations

import pytest

from adapters.telegram.settings import TelegramConfig
from hermes_gateway.events import MessageEvent
from hermes_gateway.platforms.access import AccessPolicy
from hermes_gateway.platforms.pairing import MAX_BAD_TRIES, PairingBook, PairingError
from hermes_gateway.store.store import Store


def msg(user: str = "42", chat_type: str = "dm", mentioned: bool = False) -> MessageEvent:
    return MessageEvent.create(
        platform="telegram",
        chat_type=chat_type,  # type: ignore[arg-type]
        chat_id="555" if chat_type != "dm" else user,
        user_id=user,
        message_id="1",
        text="hi",
        user_name="alice",
        mentioned=mentioned,
    )


async def test_default_is_deny_and_silent(store: Store) -> None:
    policy = AccessPolicy("telegram", TelegramConfig(), PairingBook(store))
    verdict = await policy.admit(msg())
    assert verdict.verdict == "unauthorized" and verdict.reply is None


async def test_allowlist_accepts_numbers_and_strings(store: Store) -> None:
    config = TelegramConfig.model_validate({"allowed_users": [42, "43"]})
    policy = AccessPolicy("telegram", config, None)
    assert (await policy.admit(msg("42"))).allowed
    assert (await policy.admit(msg("43"))).allowed
    assert not (await policy.admit(msg("44"))).allowed


async def test_own_and_other_bots_are_ignored_even_when_allowed(store: Store) -> None:
    policy = AccessPolicy("telegram", TelegramConfig(allow_all=True), None)
    assert (await policy.admit(msg(), from_self=True)).verdict == "self"
    assert (await policy.admit(msg(), from_bot=True)).verdict == "bot"
    assert (await policy.admit(msg(), from_bot=True, allow_bots=True)).allowed


async def test_groups_need_a_mention(store: Store) -> None:
    policy = AccessPolicy("telegram", TelegramConfig(allow_all=True), None)
    assert (await policy.admit(msg(chat_type="group"))).verdict == "not_addressed"
    assert (await policy.admit(msg(chat_type="group", mentioned=True))).allowed
    relaxed = AccessPolicy("telegram", TelegramConfig(allow_all=True, require_mention=False), None)
    assert (await relaxed.admit(msg(chat_type="group"))).allowed


async def test_pairing_code_then_approval_lets_the_user_in(store: Store) -> None:
    book = PairingBook(store)
    policy = AccessPolicy("telegram", TelegramConfig(pairing=True), book)
    first = await policy.admit(msg("77"))
    again = await policy.admit(msg("77"))
    assert first.verdict == "pairing" and first.reply is not None
    code = first.reply.split("hermes pairing approve telegram ")[1].split()[0]
    assert len(code) == 8 and again.reply == first.reply  # the same code while valid
    approved = await book.approve("telegram", code.lower())
    assert approved.user_id == "77" and approved.chat_id == "77"
    assert (await policy.admit(msg("77"))).allowed
    reloaded = PairingBook(store)  # approvals survive a restart
    await reloaded.load()
    assert reloaded.is_approved("telegram", "77")
    assert await book.revoke("telegram", "77")
    assert not (await policy.admit(msg("77"))).allowed


async def test_pairing_is_dm_only_and_capped(store: Store) -> None:
    book = PairingBook(store)
    policy = AccessPolicy("telegram", TelegramConfig(pairing=True, require_mention=False), book)
    assert (await policy.admit(msg("1", chat_type="group"))).verdict == "unauthorized"
    replies = [(await policy.admit(msg(str(u)))).reply for u in range(10, 14)]
    assert all("pairing approve" in (r or "") for r in replies[:3])
    assert replies[3] is not None and "Too many people" in replies[3]


async def test_codes_expire_after_an_hour(store: Store) -> None:
    now = [1000.0]
    book = PairingBook(store, clock=lambda: now[0])
    request = await book.request("telegram", "5", "bob", "5")
    assert request is not None
    now[0] += 3601
    with pytest.raises(PairingError):
        await book.approve("telegram", request.code)


async def test_wrong_codes_lock_approvals(store: Store) -> None:
    book = PairingBook(store)
    request = await book.request("telegram", "5", "bob", "5")
    assert request is not None
    for _ in range(MAX_BAD_TRIES):
        with pytest.raises(PairingError, match="no pending"):
            await book.approve("telegram", "WRONGCOD")
    with pytest.raises(PairingError, match="locked"):
        await book.approve("telegram", request.code)  # even the right code, for a while
