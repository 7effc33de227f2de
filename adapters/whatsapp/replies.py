"""How a reply goes out on WhatsApp: text parts under the 4096-character limit, the first
quoting the message it answers, each carrying its idempotency key in
``biz_opaque_callback_data``. The Graph API has no idempotency key and no history to read, so
the sent-check of a part a crash left in doubt is the status webhook Meta sends for it, which
echoes that key back: recorded (`Ledger`) before the webhook is answered, or awaited a while
after the restart, since Meta redelivers a status the dead process never acknowledged."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from adapters.whatsapp.graph import Graph
from adapters.whatsapp.ledger import Ledger
from hermes_gateway.platforms import OutboundMessage, PermanentAdapterError, with_retry

log = structlog.get_logger("hermes.adapters.whatsapp")


class Proofs:
    """Waiters for the status webhooks that prove a part went out, by the part's key."""

    def __init__(self, ledger: Ledger, wait_s: float) -> None:
        self.ledger = ledger
        self.wait_s = wait_s
        self._waiting: dict[str, asyncio.Event] = {}

    def arrived(self, keys: list[str]) -> None:
        """Statuses with these keys are recorded: whoever waits for one may stop."""
        for key in keys:
            if (event := self._waiting.get(key)) is not None:
                event.set()

    async def went_out(self, key: str) -> bool:
        """Whether Meta took the part sent with ``key``: its status is recorded, or arrives
        within ``wait_s``; False otherwise (it is then sent again: a double, never a loss)."""
        if await self.ledger.was_sent(key):  # its status came before the replay asked
            log.info("whatsapp.part_in_doubt", key=key, went_out=True, waited=False)
            return True
        event = self._waiting.setdefault(key, asyncio.Event())
        try:
            async with asyncio.timeout(self.wait_s):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            self._waiting.pop(key, None)
        found = await self.ledger.was_sent(key)
        log.info("whatsapp.part_in_doubt", key=key, went_out=found, waited=True)
        return found


class ChatReply:
    """One reply's primitives (a `ReplyWire`) in its chat; the wamid of the newest part is
    what the next part's intent records."""

    def __init__(self, graph: Graph, proofs: Proofs, message: OutboundMessage) -> None:
        self.graph = graph
        self.proofs = proofs
        self.message = message
        self.last = ""

    def after(self) -> str:
        return self.last

    async def post(self, index: int, part: str, key: str | None) -> None:
        message = self.message
        payload: dict[str, Any] = {
            "to": message.chat_id,
            "type": "text",
            "text": {"body": part, "preview_url": False},
        }
        if key is not None:  # echoed back in the part's status webhooks
            payload["biz_opaque_callback_data"] = key
        if index == 0 and message.kind == "reply" and message.answers:
            payload["context"] = {"message_id": message.answers[0]}  # quotes the question
        wamid = await with_retry(lambda: self.graph.send(payload), what="whatsapp.send")
        self.last = wamid or self.last

    async def edit(self, ref: str, part: str) -> None:
        raise PermanentAdapterError("whatsapp cannot edit a message")  # no previews to edit

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        if key is None:  # sent without a key: nothing can prove it went out
            return False
        return await self.proofs.went_out(key)


async def send_template(graph: Graph, chat: str, name: str, language: str) -> str:
    """The approved template ``name``: the one message that may open a closed window."""
    payload = {
        "to": chat,
        "type": "template",
        "template": {"name": name, "language": {"code": language}},
    }
    return await with_retry(lambda: graph.send(payload), what="whatsapp.template")
