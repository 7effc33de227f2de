"""Email's reply wire: each part one mail (`compose`) with a Message-ID derived from its key;
the sent-check finds that Message-ID in the bot's own mailbox, where the blind self-copy of
every sent mail lands (docs/exactly-once.md); and where a reply goes, learned at intake or
read back from the answered mail after a restart."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

import structlog

from adapters.mail.compose import NEW_SUBJECT, Thread, compose, message_id
from adapters.mail.imap import Mailbox
from adapters.mail.inbound import has_real_id, headers_of, read_references, subject_of
from adapters.mail.settings import EmailConfig
from adapters.mail.smtp import MaybeSentError, send_mail
from hermes_gateway.platforms import (
    AdapterError,
    OutboundMessage,
    PermanentAdapterError,
    with_retry,
)

log = structlog.get_logger("hermes.adapters.email")
THREADS_KEPT = 2048
CHECK_PAUSE_S = 0.5
SEND_ATTEMPTS = 3  # a send, and two more after transient failures (backing off)


class Threads:
    """Where the replies to recent mails go, by the answered mail's Message-ID; a mail not
    known here (a restart) is looked up in the mailbox."""

    def __init__(self) -> None:
        self._known: OrderedDict[str, Thread] = OrderedDict()

    def keep(self, mail_id: str, thread: Thread) -> None:
        self._known[mail_id] = thread
        self._known.move_to_end(mail_id)
        while len(self._known) > THREADS_KEPT:
            self._known.popitem(last=False)

    async def of(self, config: EmailConfig, message: OutboundMessage) -> Thread:
        """Where ``message`` goes: under the mail it answers (its subject and chain as kept,
        else as read back from the mailbox), or a new mail when it answers none."""
        parent = message.reply_to
        if parent is None:
            return Thread(message.chat_id, NEW_SUBJECT)
        known = self._known.get(parent)
        if known is not None:
            return known
        if not has_real_id(parent):  # an over-long Message-ID, or none: not to be looked up
            return Thread(message.chat_id, NEW_SUBJECT)
        try:
            found = await _read_thread(config, parent, message.chat_id)
        except AdapterError as exc:
            log.warning("email.thread_unknown", error=str(exc))
            found = None
        thread = found or Thread(message.chat_id, "", parent)
        self.keep(parent, thread)
        return thread


async def _read_thread(config: EmailConfig, parent: str, to: str) -> Thread | None:
    box = await Mailbox.open(config, config.mailbox)
    try:
        uids = await box.find(parent)
        raw = await box.header(uids[0]) if uids else None
    finally:
        await box.close()
    if raw is None:
        return None
    return Thread(to, subject_of(raw), parent, read_references(headers_of(raw)))


async def find_sent(config: EmailConfig, mail_id: str, wait_s: float) -> bool:
    """Whether a mail with ``mail_id`` is in the bot's mailbox (its inbox or the sent folder),
    looking again for ``wait_s`` while the server may still be delivering the self-copy. False
    when the mailbox cannot be read: the part is then sent again (a double beats a loss)."""
    deadline = time.monotonic() + wait_s
    folders = [f for f in (config.mailbox, config.sent_folder) if f]
    while True:
        try:
            if await _in_any(config, mail_id, folders):
                return True
        except AdapterError as exc:
            log.warning("email.sent_check_failed", error=str(exc))
            return False
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(CHECK_PAUSE_S)


async def _in_any(config: EmailConfig, mail_id: str, folders: list[str]) -> bool:
    box = await Mailbox.open(config, folders[0])
    try:
        for n, folder in enumerate(folders):
            if n:
                await box.select(folder)
            if await box.find(mail_id):
                return True
        return False
    finally:
        await box.close()


class MailReply:
    """One reply's wire: every part a mail in the thread, answering the same mail."""

    def __init__(self, config: EmailConfig, message: OutboundMessage, thread: Thread) -> None:
        self.config = config
        self.message = message
        self.thread = thread
        self.domain = config.address.rpartition("@")[2]
        self._last = thread.parent or ""

    def after(self) -> str:
        return self._last

    async def post(self, index: int, part: str, key: str | None) -> None:
        """Send one part, retrying a failed send; after a failure that may have come once the
        server took the mail (a timeout, a dropped connection), the mailbox is asked first."""
        mail_id = message_id(key, self.domain)
        mail = compose(self.config.address, self.config.from_name, self.thread, part, mail_id)
        failed = False

        async def attempt() -> None:
            nonlocal failed
            wait_s = self.config.sent_check_wait_s
            if failed and key is not None and await find_sent(self.config, mail_id, wait_s):
                log.info("email.sent_despite_error", message_id=mail_id)
                return
            try:
                await send_mail(self.config, mail, self.thread.to)
            except MaybeSentError:
                failed = True
                raise

        await with_retry(attempt, what="email.send", attempts=SEND_ATTEMPTS)
        self._last = mail_id
        log.info("email.sent", index=index, message_id=mail_id)

    async def edit(self, ref: str, part: str) -> None:
        raise PermanentAdapterError("a sent mail cannot be edited")

    async def sent(self, part: str, key: str | None, after: str) -> bool:
        if key is None:
            return False
        mail_id = message_id(key, self.domain)
        found = await find_sent(self.config, mail_id, self.config.sent_check_wait_s)
        log.info("email.sent_check", message_id=mail_id, found=found)
        return found
