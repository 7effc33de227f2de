"""The Telegram poller takes a getUpdates answer's chats side by side (their inbox writes then
share a commit) and each chat's updates in order, and keeps the offset on a refused one."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from telegram import Update

from adapters.telegram.http import AiohttpRequest
from adapters.telegram.poller import Poller


def _item(uid: int, chat: int) -> dict[str, Any]:
    return {
        "update_id": uid,
        "message": {
            "message_id": uid,
            "date": 0,
            "chat": {"id": chat, "type": "private"},
            "from": {"id": chat, "is_bot": False, "first_name": "u"},
            "text": f"m{uid}",
        },
    }


class _Inbox:
    """A store's stand-in: each take waits until ``together`` takes are in flight at once (or
    a short while), records its order, and refuses the updates in ``refuse``."""

    def __init__(self, together: int, refuse: frozenset[int] = frozenset()) -> None:
        self.together = together
        self.refuse = refuse
        self.in_flight = 0
        self.most = 0
        self.order: list[int] = []
        self._all_in = asyncio.Event()

    async def take(self, update: Update) -> bool:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= self.together:
            self._all_in.set()
        try:
            await asyncio.wait_for(self._all_in.wait(), 0.5)
        except TimeoutError:
            pass
        self.in_flight -= 1
        self.order.append(update.update_id)
        return update.update_id not in self.refuse


def _poller(inbox: _Inbox) -> Poller:
    return Poller(
        None,  # type: ignore[arg-type]  # parsing needs no bot
        cast(AiohttpRequest, None),
        inbox.take,
        timeout=10,
        read_margin=2,
        allowed_updates=(),
        on_error=lambda exc: None,
        writable=asyncio.sleep,  # type: ignore[arg-type]
    )


async def test_chats_are_taken_side_by_side_each_in_order() -> None:
    # chats 1, 2 and 3; chat 1 has three updates, which must be taken in order
    items = [_item(10, 1), _item(11, 2), _item(12, 1), _item(13, 3), _item(14, 1)]
    inbox = _Inbox(together=3)
    poller = _poller(inbox)
    assert await poller._take_all(items) == (5, False)
    assert inbox.most == 3  # one take per chat at once
    assert [u for u in inbox.order if u in (10, 12, 14)] == [10, 12, 14]
    assert sorted(inbox.order) == [10, 11, 12, 13, 14]
    assert poller.offset == 15


async def test_a_refused_update_keeps_the_offset_on_it() -> None:
    items = [_item(20, 1), _item(21, 2), _item(22, 2), _item(23, 3)]
    inbox = _Inbox(together=3, refuse=frozenset({21}))
    poller = _poller(inbox)
    assert await poller._take_all(items) == (4, True)
    assert 22 not in inbox.order  # its chat stopped at the refused one
    assert poller.offset == 21  # 20 is confirmed; 21 on is offered again
