"""The real mail servers the email tests run against, started by the test on loopback:
Debian's Dovecot (IMAP, a throwaway maildir, a passwd-file of its own) and aiosmtpd (SMTP,
which keeps what it is sent and delivers mail for Dovecot's users into their inbox by IMAP
APPEND, as a local delivery agent would).

Dovecot changes its processes' user and groups as root does, which a user namespace with only
root mapped (`unshare -rn`, where the tests run) refuses; so it runs in a nested user namespace
that maps the caller to ``nobody``, where it sees itself as an ordinary user and changes
nothing."""

from __future__ import annotations

import contextlib
import imaplib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

CONF = """\
protocols = imap
listen = 127.0.0.1
base_dir = {root}/run
state_dir = {root}/state
instance_name = hermes-test-{port}
default_internal_user = nobody
default_internal_group = nogroup
default_login_user = nobody
first_valid_uid = 1
mail_location = maildir:{root}/mail/%u
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
log_path = {root}/dovecot.log
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = static
  args = uid=65534 gid=65534 home={root}/mail/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
  chroot =
}}
service anvil {{
  chroot =
}}
namespace inbox {{
  inbox = yes
  mailbox Sent {{
    special_use = \\Sent
    auto = subscribe
  }}
}}
"""


NESTED_USERNS = ("unshare", "-U", "--map-user=65534", "--map-group=65534")


def have_dovecot() -> bool:
    return shutil.which("dovecot") is not None and shutil.which("unshare") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Dovecot:
    """A Dovecot of the test's own; ``users`` maps each address to its password."""

    def __init__(self, root: Path, users: dict[str, str]) -> None:
        self.root = root
        self.users = users
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Dovecot:
        for sub in ("run", "state", "mail"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "passwd").write_text(
            "".join(f"{user}:{{PLAIN}}{pw}\n" for user, pw in self.users.items())
        )
        conf = self.root / "dovecot.conf"
        conf.write_text(CONF.format(root=self.root, port=self.port))
        self.proc = subprocess.Popen(
            [*NESTED_USERNS, "dovecot", "-c", str(conf), "-F"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: `stop` ends its children too
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with self.imap(next(iter(self.users))):
                    return self
            except (OSError, imaplib.IMAP4.error):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"dovecot exited: {self.log()}") from None
                time.sleep(0.1)
        raise RuntimeError(f"dovecot did not answer: {self.log()}")

    def stop(self) -> None:
        """Stop the master and every process it started (its imap processes outlive it, with
        their clients' connections, when only the master is signalled)."""
        if self.proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the children still in the group

    def log(self) -> str:
        try:
            return (self.root / "dovecot.log").read_text()[-3000:]
        except OSError:
            return ""

    def imap(self, user: str) -> imaplib.IMAP4:
        conn = imaplib.IMAP4("127.0.0.1", self.port, timeout=10)
        conn.login(user, self.users[user])
        return conn

    def deliver(self, user: str, raw: bytes, folder: str = "INBOX") -> None:
        with self.imap(user) as conn:
            typ, data = conn.append(folder, None, None, raw)
            assert typ == "OK", data

    def mails(self, user: str, folder: str = "INBOX") -> list[tuple[str, Message]]:
        """Every mail in ``folder``: its flags and the mail."""
        found: list[tuple[str, Message]] = []
        with self.imap(user) as conn:
            conn.select(folder, readonly=True)
            _, data = conn.uid("SEARCH", "ALL")
            for uid in data[0].split():
                _, got = conn.uid("FETCH", uid, "(FLAGS BODY.PEEK[])")
                head, raw = got[0]  # type: ignore[misc]
                found.append((head.decode(), message_from_bytes(raw)))
        return found


@dataclass
class Sent:
    sender: str
    rcpts: list[str]
    raw: bytes

    @property
    def message(self) -> Message:
        return message_from_bytes(self.raw)


@dataclass
class _Handler:
    server: MailServer
    hooks: list[Callable[[Sent], None]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        sent = Sent(envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.content))
        self.server.take(sent)
        for hook in self.hooks:
            hook(sent)
        return "250 OK queued"


class MailServer:
    """aiosmtpd on loopback with AUTH (``users``); delivers to Dovecot's users, keeps the rest."""

    def __init__(self, dovecot: Dovecot, users: dict[str, str]) -> None:
        self.dovecot = dovecot
        self.users = users
        self.port = free_port()
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self.handler = _Handler(self)
        self.controller = Controller(
            self.handler,
            hostname="127.0.0.1",
            port=self.port,
            authenticator=self._auth,
            auth_require_tls=False,
        )

    def _auth(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        ok = isinstance(data, LoginPassword) and self.users.get(data.login.decode()) == (
            data.password.decode()
        )
        return AuthResult(success=ok, handled=False)

    def start(self) -> MailServer:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()

    def take(self, sent: Sent) -> None:
        for rcpt in sent.rcpts:
            if rcpt in self.dovecot.users:
                self.dovecot.deliver(rcpt, sent.raw)
        with self._lock:
            self.sent.append(sent)

    def to(self, address: str) -> list[Message]:
        """The mails sent to ``address`` (by its To header), in order."""
        with self._lock:
            return [s.message for s in self.sent if address in str(s.message.get("To", ""))]
