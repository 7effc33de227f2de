"""Email: new mail is read from the IMAP mailbox (IDLE, or polling where the server lacks it),
checked (automatic traffic, one From address, the trusted server's authentication results),
submitted, and flagged read only once its inbox row is durable; replies go out over SMTP as
threaded mails (`replies`)."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from email.message import Message
from pathlib import Path

import structlog

from adapters.mail.auth import authenticated
from adapters.mail.compose import Thread, is_ours, message_id, reply_subject, split
from adapters.mail.imap import Mailbox
from adapters.mail.inbound import (
    KEY_MAX,
    NO_ID_PREFIX,
    Mail,
    has_real_id,
    inbox_key,
    kind_of,
    part_bytes,
    read_mail,
)
from adapters.mail.replies import MailReply, Threads, find_sent
from adapters.mail.settings import EmailConfig
from hermes_gateway.platforms import (
    AdapterAuthError,
    AdapterHost,
    Attachment,
    Backoff,
    GiveUp,
    Health,
    Inbound,
    Intake,
    MessageEvent,
    OutboundMessage,
    PermanentAdapterError,
    PreviewBook,
    Replier,
    RetryLater,
    StreamSink,
    Supervisor,
    TransientAdapterError,
    first_of,
)

log = structlog.get_logger("hermes.adapters.email")
START_TIMEOUT_S = 20.0
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 60.0
TOLD_KEPT = 4096


class EmailAdapter:
    name = "email"

    def __init__(self, host: AdapterHost) -> None:
        self.host = host
        self.intake = Intake(host, self.name)
        self.supervisor = Supervisor(
            self.name,
            self._connect_once,
            backoff=Backoff(RETRY_FIRST_S, RETRY_MAX_S, factor=2.0),
            describe=lambda _n, exc, _wait: f"connecting (last error: {exc or type(exc).__name__})",
        )
        self.lead = host.leadership(f"email-reader:{self.config.login.lower()}")
        self._replier: Replier[str, str] = Replier(PreviewBook(self.name))
        self._threads = Threads()
        self._admitting: set[str] = set()  # mails in admission: a notice now is its verdict's
        self._told: set[str] = set()  # admission notices sent (their Message-IDs)

    @property
    def config(self) -> EmailConfig:
        """This platform's section of the config in force, read at each use (SIGHUP)."""
        return self.host.config.platforms.section("email", EmailConfig)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Log in (a refused login raises `AdapterAuthError`: exit 78) and read the mailbox;
        network trouble is retried in the background while the gateway serves."""
        self.supervisor.down("connecting")
        self.supervisor.start()
        await self.supervisor.settled(START_TIMEOUT_S)
        if self.supervisor.fatal is not None:
            raise self.supervisor.fatal

    async def stop(self) -> None:
        await self.supervisor.stop()
        await self.lead.release()  # a stand-by instance reads the mailbox at once

    def health(self) -> Health:
        return self.supervisor.health

    def stream(self, event: MessageEvent) -> StreamSink | None:
        return None  # a sent mail cannot be edited: no live preview

    async def _connect_once(self) -> None:
        """One IMAP session: read every unread mail, then wait for more (IDLE or a pause),
        until the connection fails (the supervisor reconnects). In a cluster one instance
        reads the mailbox (the reader's lease); the others stand by and still send."""
        config = self.config
        if not self.lead.leading:
            self.supervisor.ready("stand-by: another instance reads the mailbox")
            await self.lead.acquire()
        try:
            box = await Mailbox.open(config, config.mailbox)
        except AdapterAuthError as exc:
            log.error("email.auth_failed", error=str(exc))
            raise GiveUp(str(exc)) from exc
        reading = asyncio.ensure_future(self._read(box))
        lost = asyncio.ensure_future(self.lead.lost())
        try:
            await first_of(reading, lost)
        finally:
            await box.close()
        if not reading.cancelled():
            reading.result()  # the connection failed: raised for the supervisor
        log.warning("email.reader_lease_lost")
        await self.lead.release()
        raise RetryLater(0.0)

    async def _read(self, box: Mailbox) -> None:
        config = self.config
        idle = config.idle and box.can("IDLE")
        self.supervisor.ready("connected (idle)" if idle else "connected (polling)")
        log.info("email.started", mailbox=config.mailbox, idle=idle)
        while True:
            if await self._drain(box):  # else a mail is still to take: again at once
                await box.wait(self.config.poll_interval_s, self.config.idle)
            self.supervisor.progress()

    # -- intake -------------------------------------------------------------------------

    async def _drain(self, box: Mailbox) -> bool:
        """Take every unread mail, oldest first; stop at one the store cannot keep yet (it
        stays unread, and is read again once the store can write): False then."""
        for uid in await box.search("UNSEEN"):
            if not await self._take(box, uid):
                await self.host.writable()
                return False
        return True

    async def _take(self, box: Mailbox, uid: int) -> bool:
        """One mail; False when it must stay unread. It is flagged read only after the core
        took it (its inbox row written), refused it, or it was set aside: a crash before the
        flag reads it again, and the inbox's key (its Message-ID) drops the copy."""
        config = self.config
        if await box.size(uid) > config.max_mail_bytes:
            log.warning("email.too_large", uid=uid, limit=config.max_mail_bytes)
            await box.mark_seen(uid)
            return True
        raw = await box.fetch(uid)
        if raw is None:
            return True  # gone meanwhile
        fallback = f"{NO_ID_PREFIX}{box.uidvalidity}-{uid}@{config.mailbox}"
        mail, why = await asyncio.to_thread(screen, raw, fallback, config)
        if why == OWN_COPY:
            await self._file_own_copy(box, uid)
            return True
        if mail is None or why:
            log.info("email.ignored", uid=uid, why=why, sender=mail.sender if mail else "?")
            await box.mark_seen(uid)
            return True
        if not await self._submit(mail):
            return False
        await box.mark_seen(uid)
        return True

    async def _file_own_copy(self, box: Mailbox, uid: int) -> None:
        """The blind copy of a sent reply: into the sent folder (the sent-check finds it
        there), or left read where the operator keeps none."""
        folder = self.config.sent_folder
        if folder:
            try:
                await box.move(uid, folder)
                return
            except TransientAdapterError as exc:
                log.warning("email.own_copy_not_moved", error=str(exc))
        await box.mark_seen(uid)

    async def _submit(self, mail: Mail) -> bool:
        assert mail.sender is not None
        event = self._event(mail)
        parent = mail.message_id if has_real_id(mail.message_id) else None
        subject = reply_subject(mail.subject)  # also when there is no mail to name
        thread = Thread(mail.sender, subject, parent, mail.references)
        self._threads.keep(event.message_id, thread)

        async def admitted(ev: MessageEvent) -> MessageEvent:
            self._admitting.discard(ev.message_id)
            return ev

        self._admitting.add(event.message_id)
        try:
            taken = await self.intake.take(
                lambda _per_user: Inbound(event), durable=True, admitted=admitted
            )
        finally:
            self._admitting.discard(event.message_id)
        return not taken.keep

    def _event(self, mail: Mail) -> MessageEvent:
        assert mail.sender is not None
        attachments = tuple(
            Attachment(
                kind=kind_of(p.mime),
                file_id=f"{p.index}:{mail.message_id}",
                name=p.name,
                mime_type=p.mime,
                size=p.size,
            )
            for p in mail.attachments
        )
        return MessageEvent.create(
            platform=self.name,
            chat_type="dm",
            chat_id=mail.sender,
            user_id=mail.sender,
            message_id=inbox_key(mail.message_id),
            text=mail.text or mail.subject,
            thread_id=mail.thread_key,
            user_name=mail.sender,
            attachments=attachments,
            reply_to=mail.references[-1] if mail.references else None,
            mentioned=True,
        )

    # -- delivery -----------------------------------------------------------------------

    async def send(self, message: OutboundMessage) -> None:
        """A reply as threaded mails of at most `message_limit` characters each; an admission
        notice (a pairing code) at most once per sender and text."""
        config = self.config
        if message.kind == "notice" and message.reply_to in self._admitting:
            await self._tell_once(config, message)
            return
        thread = await self._threads.of(config, message)
        parts = split(message.text, config.message_limit)
        await self._replier.send(message, parts, MailReply(config, message, thread))

    async def _tell_once(self, config: EmailConfig, message: OutboundMessage) -> None:
        """A stranger writing ten mails gets one pairing mail, not ten: the notice's Message-ID
        is derived from its sender and text (the same code while it is valid), and it is not
        sent again once that mail is in the bot's mailbox."""
        raw = "\x1f".join((message.chat_id, message.text))
        key = "n" + hashlib.blake2b(raw.encode(), digest_size=12).hexdigest()
        mail_id = message_id(key, _domain(config))
        if mail_id in self._told or await find_sent(config, mail_id, 0.0):
            log.info("email.notice_already_sent", to=message.chat_id)
            return
        thread = await self._threads.of(config, message)
        await MailReply(config, message, thread).post(0, message.text, key)
        self._told.add(mail_id)
        if len(self._told) > TOLD_KEPT:
            self._told.clear()

    async def download(self, attachment: Attachment) -> Path:
        """Fetch one attachment from its mail, only when a tool asks; over `media_max_bytes`
        (announced or decoded) raises `PermanentAdapterError`."""
        config = self.config
        limit = config.media_max_bytes
        if attachment.size > limit:
            raise PermanentAdapterError(f"the attachment is larger than {limit} bytes")
        index, _, mail_id = attachment.file_id.partition(":")
        raw = await self._fetch_by_id(config, mail_id)
        got = await asyncio.to_thread(part_bytes, raw, int(index or -1))
        if got is None:
            raise PermanentAdapterError("the attachment is no longer in its mail")
        if len(got[1]) > limit:
            raise PermanentAdapterError(f"the attachment is larger than {limit} bytes")
        target = config_media(self.host) / f"{secrets.token_hex(6)}-{_safe(attachment.name)}"
        await asyncio.to_thread(_write, target, got[1])
        return target

    async def _fetch_by_id(self, config: EmailConfig, mail_id: str) -> bytes:
        box = await Mailbox.open(config, config.mailbox)
        try:
            uids = await box.find(mail_id)
            if not uids:
                raise PermanentAdapterError("the mail is no longer in the mailbox")
            if await box.size(uids[0]) > config.max_mail_bytes:
                raise PermanentAdapterError("the mail is too large to read")
            raw = await box.fetch(uids[0])
        finally:
            await box.close()
        if raw is None:
            raise PermanentAdapterError("the mail is no longer in the mailbox")
        return raw


OWN_COPY = "the bot's own copy"


def screen(raw: bytes, fallback: str, config: EmailConfig) -> tuple[Mail | None, str]:
    """Read a mail and say why it is not handed to the core ("" when it is): the bot's own
    copy (`OWN_COPY`), automatic traffic (never answered: no mail loops), no single sender, or
    a sender its server did not vouch for (no pairing mail either: a forged sender would make
    the bot a backscatter source). Nothing a mail holds may raise from here."""
    try:
        head, mail = read_mail(raw, fallback)
        return mail, _refusal(head, mail, config)
    except Exception as exc:
        return None, f"unreadable: {exc!r}"[:200]


def _refusal(head: Message, mail: Mail, config: EmailConfig) -> str:
    own = config.address.lower()
    if mail.sender == own and is_ours(mail.message_id, _domain(config)):
        return OWN_COPY
    if mail.automatic:
        return mail.automatic
    if mail.sender is None:
        return "the From header is not exactly one address"
    if len(mail.sender) > KEY_MAX:
        return "the sender's address is longer than the inbox keeps"
    if mail.sender == own:
        return "from the bot's own address"
    if not config.require_authentication:
        return ""
    verdict = authenticated(head, mail.sender, config.trusted_authserv_ids)
    return "" if verdict.ok else f"not authenticated: {verdict.why}"


def config_media(host: AdapterHost) -> Path:
    return host.config.home_path / "media"


def _domain(config: EmailConfig) -> str:
    return config.address.rpartition("@")[2].lower()


def _safe(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80].lstrip(".")
    return cleaned or "attachment"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
