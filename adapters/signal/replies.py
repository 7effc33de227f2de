"""How a reply goes out on Signal: Markdown split at the message limit, one ``send`` per part
(the first quoting the message answered), files as attachments; each send's timestamp is
recorded with the part's key, and a part a crash left in doubt is asked after (`SentCheck`)."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import structlog

from adapters.signal.inbound import GROUP, quoted, target
from adapters.signal.ledger import Ledger, Sent
from adapters.signal.rpc import Daemon, RpcError, Unreached
from hermes_gateway.platforms import (
    OutboundMessage,
    PermanentAdapterError,
    RateLimitedError,
    Target,
    TransientAdapterError,
    Upload,
    split_rendered,
)

log = structlog.get_logger("hermes.adapters.signal")
# Signal shows text as it is: the Markdown goes out as written, split fence-aware
_PLAIN = Target(str, str, str)
# a send's per-recipient results that mean the message did not reach anyone for now
_RETRYABLE = frozenset({"NETWORK_FAILURE", "RATE_LIMIT_FAILURE"})
SEND_ATTEMPTS = 4  # waits 1, 2, 4 s between: a daemon restarting under systemd is back


def split(text: str, limit: int) -> list[str]:
    return split_rendered(text, limit, _PLAIN)


def now_ms() -> int:
    return int(time.time() * 1000)


async def send_message(
    daemon: Daemon, ledger: Ledger, chat: str, params: dict[str, Any], key: str = ""
) -> int:
    """One ``send`` to ``chat``; its timestamp, recorded (with ``key``) before this returns.
    Repeated only when it surely did not go out: the daemon was not reached, or it refused at
    Signal's rate limit (a restarting daemon is back within the retries)."""
    for attempt in range(1, SEND_ATTEMPTS + 1):
        try:
            return await _send_once(daemon, ledger, chat, params, key)
        except (Unreached, RateLimitedError) as exc:
            if attempt == SEND_ATTEMPTS:
                raise
            wait = exc.retry_after if isinstance(exc, RateLimitedError) else 0.5 * 2**attempt
            log.warning("signal.send_retry", attempt=attempt, error=str(exc))
            await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


async def _send_once(
    daemon: Daemon, ledger: Ledger, chat: str, params: dict[str, Any], key: str
) -> int:
    result = await daemon.call("send", {**target(chat), **params})
    ts = result.get("timestamp") if isinstance(result, dict) else None
    if not isinstance(ts, int):
        raise TransientAdapterError("signal-cli send: no timestamp in the answer")
    try:
        _check_results(chat, result.get("results"))
    except (PermanentAdapterError, TransientAdapterError):
        key = ""  # it reached nobody: recorded (its receipts are no evidence), not as the part
        raise
    finally:
        ledger.note_sent(Sent(chat, ts, key))
        await ledger.save()
    return ts


def _check_results(chat: str, results: Any) -> None:
    """A DM that reached nobody is an error (a group's partial reach is not: the others got
    it); a network failure is worth another try, an unregistered number is not."""
    if chat.startswith(GROUP) or not isinstance(results, list) or not results:
        return
    kinds = {str(r.get("type")) for r in results if isinstance(r, dict)}
    if not kinds or "SUCCESS" in kinds:
        return
    if kinds <= _RETRYABLE:
        raise TransientAdapterError(f"signal-cli send: {', '.join(sorted(kinds))}")
    raise PermanentAdapterError(f"signal-cli send: {', '.join(sorted(kinds))}")


class SentCheck:
    """Whether a part in doubt went out: its key among the recorded sends, else evidence on the
    stream (a receipt from the chat's people for an unrecorded send after the part's intent,
    or a sent transcript of its text), waited for up to ``wait_s``."""

    def __init__(self, daemon: Daemon, ledger: Ledger, wait_s: float) -> None:
        self.daemon = daemon
        self.ledger = ledger
        self.wait_s = wait_s

    async def went_out(self, chat: str, text: str, key: str | None, after: str) -> bool:
        if key and self.ledger.by_key(key) is not None:
            log.info("signal.part_found", chat=chat, how="recorded")
            return True
        if not after.isdigit():
            return False
        senders = await self._people(chat)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            self.ledger.changed.clear()
            if (seen := self.ledger.evidence(senders, int(after), text)) is not None:
                log.info("signal.part_found", chat=chat, how="receipt", ts=seen.ts)
                return True
            left = deadline - loop.time()
            if left <= 0:
                log.info("signal.part_not_found", chat=chat, waited_s=self.wait_s)
                return False
            try:
                await asyncio.wait_for(self.ledger.changed.wait(), left)
            except TimeoutError:
                pass

    async def _people(self, chat: str) -> frozenset[str]:
        """Who acknowledges a message to ``chat``: its user, or the group's members."""
        if not chat.startswith(GROUP):
            return frozenset({chat})
        try:
            groups = await self.daemon.call("listGroups")
        except (RpcError, TransientAdapterError) as exc:
            log.warning("signal.members_unknown", error=str(exc))
            return frozenset({chat})
        wanted = chat[len(GROUP) :]
        found: set[str] = {chat}
        for group in groups if isinstance(groups, list) else []:
            if isinstance(group, dict) and group.get("id") == wanted:
                found.update(_member_ids(group.get("members")))
        return frozenset(found)


def _member_ids(members: Any) -> set[str]:
    out: set[str] = set()
    for m in members if isinstance(members, list) else []:
        if isinstance(m, str):
            out.add(m)
        elif isinstance(m, dict):
            out.update(str(m[k]) for k in ("number", "uuid") if isinstance(m.get(k), str))
    return out


class SignalReply:
    """One reply's primitives (an `UploadWire`): the reference a part's intent records is the
    time it is recorded, in Signal's milliseconds, since a part sent after it has a timestamp
    no earlier (the daemon stamps it when it sends)."""

    def __init__(
        self, daemon: Daemon, ledger: Ledger, check: SentCheck, message: OutboundMessage
    ) -> None:
        self.daemon = daemon
        self.ledger = ledger
        self.check = check
        self.message = message

    def after(self) -> str:
        return str(now_ms())

    async def post(self, index: int, part: str, key: str | None) -> None:
        params: dict[str, Any] = {"message": part}
        if index == 0:
            params.update(_quote(self.message))
        await send_message(self.daemon, self.ledger, self.message.chat_id, params, key or "")

    async def edit(self, ref: str, part: str) -> None:
        raise PermanentAdapterError("signal: no live preview to edit")

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        return await self.check.went_out(self.message.chat_id, part, key, after)

    async def upload(self, index: int, upload: Upload, key: str | None) -> None:
        file = upload.file
        data = base64.b64encode(upload.data).decode()
        uri = f"data:application/octet-stream;filename={file.name};base64,{data}"
        params = {"message": file.caption, "attachments": [uri]}
        await send_message(self.daemon, self.ledger, self.message.chat_id, params, key or "")

    async def uploaded(self, upload: Upload, key: str | None, after: str) -> bool:
        return await self.check.went_out(self.message.chat_id, upload.file.caption, key, after)


def _quote(message: OutboundMessage) -> dict[str, Any]:
    """The quote of the message answered (a reply's first part), when there is one."""
    where = quoted(message.reply_to or "") if message.kind == "reply" else None
    if where is None:
        return {}
    author, ts = where
    return {"quoteTimestamp": ts, "quoteAuthor": author}
