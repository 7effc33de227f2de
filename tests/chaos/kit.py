"""Shared pieces of the reliability suites: a Telegram fake that can kill the gateway at the
moment it accepts a send, a scripted model with tool calls, a tool that takes its time, a driver
of numbered messages from several chats, the tally of what arrived, and the figures file the
one-command runner (`python -m tests.chaos.report`) reads."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import re
import signal
import sqlite3
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from hermes_gateway.config import Config, load_config
from hermes_gateway.logs import configure_logging
from tests.fakes.openai import FakeOpenAI, Response, text, tool_calls
from tests.fakes.telegram import FakeTelegram
from tests.harness import make_config
from tests.security import keys

RESULTS_ENV = "HERMES_RELIABILITY_RESULTS"
TOKEN_RE = re.compile(r"#c(\d+)-m(\d+)")


def record(name: str, figures: dict[str, Any]) -> None:
    """Write ``figures`` where the report runner collects them (when it is the caller)."""
    out = os.environ.get(RESULTS_ENV)
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(figures, indent=2, default=str))


def env_number(name: str, default: float) -> float:
    """A knob of the slow suites (``HERMES_CHAOS_ROUNDS``, ``HERMES_SOAK_SECONDS``...)."""
    raw = os.environ.get(name)
    return float(raw) if raw else default


@contextlib.contextmanager
def fake_llm_with_key() -> Iterator[FakeOpenAI]:
    """A fake model that insists on `keys.MODEL_KEY`, so the key is in every request."""
    with FakeOpenAI(api_key=keys.MODEL_KEY) as fake:
        yield fake


def secrets_config(home: Path, level: str = "debug") -> Config:
    """A config that carries every test secret (so the redactor knows them all) and writes
    its log under ``home``; only its logging and secrets matter."""
    home.mkdir(parents=True, exist_ok=True)
    data = {
        "home": str(home),
        "model": {"api_key": keys.MODEL_KEY},
        "control": {"token": keys.CONTROL_TOKEN},
        "logging": {"level": level, "format": "json"},
        "platforms": {
            "telegram": {"token": keys.TELEGRAM_TOKEN, "webhook_secret": keys.WEBHOOK_SECRET},
            "discord": {"token": keys.DISCORD_TOKEN},
            "slack": {
                "bot_token": keys.SLACK_BOT_TOKEN,
                "app_token": keys.SLACK_APP_TOKEN,
                "signing_secret": keys.SLACK_SIGNING_SECRET,
            },
        },
    }
    path = home / "config.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return load_config(path, {"HOME": str(home)})


@contextlib.contextmanager
def real_logging(config: Config) -> Iterator[Callable[[], list[Path]]]:
    """Route this process's logs through the daemon's own pipeline (JSON, redaction, rotating
    file) while an in-process gateway runs; yields a function listing the files to scan."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, structlog.get_config())
    stderr = io.StringIO()
    sink = configure_logging(config, stderr)
    ours = [h for h in root.handlers if h not in saved[0]]
    dump = config.home_path / "logs" / "stderr.log"

    def files() -> list[Path]:
        dump.write_text(stderr.getvalue())
        return [*sorted((config.home_path / "logs").glob("gateway.log*")), dump]

    try:
        yield files
    finally:
        for handler in ours:
            root.removeHandler(handler)
        sink.stop()
        files()
        for handler in saved[0]:
            # pytest swaps its capture handlers per test phase: never bring back a stale one
            if not type(handler).__module__.startswith("_pytest") and handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(saved[1])
        structlog.configure(**saved[2])


def telegram_config(
    tmp_path: Path, llm: FakeOpenAI, tg: FakeTelegram, chats: tuple[int, ...] = (1001,), **over: Any
) -> Config:
    """An in-process gateway on ``tg`` and ``llm`` with the test secrets; ``over`` deep-merges
    over the defaults (``runner={...}``, ``telegram={...}`` for the platform section)."""
    section = {
        "enabled": True,
        "token": keys.TELEGRAM_TOKEN,
        "base_url": tg.api_url,
        "base_file_url": tg.file_url,
        "allowed_users": list(chats),
        **over.pop("telegram", {}),
    }
    model = {"api_key": keys.MODEL_KEY, **over.pop("model", {})}
    return make_config(tmp_path, llm.base_url, model=model, platforms={"telegram": section}, **over)


class ChaosTelegram(FakeTelegram):
    """`FakeTelegram` with the test secrets, a clock on every send, and a one-shot hook that
    runs on the fake's loop right after a sendMessage is recorded, before the bot sees the OK."""

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("token", keys.TELEGRAM_TOKEN)
        kw.setdefault("bot_id", keys.TELEGRAM_BOT_ID)
        super().__init__(**kw)
        self.sent_at: list[float] = []  # time.monotonic() of each `sent` entry
        self._after_send: Callable[[dict[str, Any]], None] | None = None

    def successor(self) -> ChaosTelegram:
        """A new server on this one's address after it went away: update and message ids go
        on from where they were, as Telegram's do (the gateway dedupes on message ids)."""
        fresh = ChaosTelegram(token=self.token, bot_id=self.bot_id, port=self.port)
        fresh._next_update_id = self._next_update_id
        fresh._message_ids.update(self._message_ids)
        return fresh.start()

    def arm(self, hook: Callable[[dict[str, Any]], None]) -> None:
        """Call ``hook(sent_record)`` after the next sendMessage, before its OK goes out."""
        self._after_send = hook

    def disarm(self) -> None:
        self._after_send = None

    async def _send_message(self, p: dict[str, Any]) -> dict[str, Any]:
        msg = await super()._send_message(p)
        self.sent_at.append(time.monotonic())
        hook, self._after_send = self._after_send, None
        if hook is not None:
            hook(self.sent[-1])
        return msg


class ChaosModel:
    """The fake model's responder: some turns first call a tool (deterministically, by the
    message numbers), every answer names the message numbers it answers (``ack #c1-m7``)."""

    def __init__(
        self,
        tool_share: float = 0.4,
        delay: tuple[float, float] = (0.02, 0.15),
        tool_path: str = "slow.fifo",
        seed: int = 0,
    ) -> None:
        self.tool_share = tool_share
        self.delay = delay
        self.tool_path = tool_path
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Response:
        with self._lock:
            delay = self._rng.uniform(*self.delay)
        messages = body.get("messages") or []
        names = " ".join(open_tokens(messages))
        first_step = bool(messages) and messages[-1].get("role") == "user"
        if first_step and names and self._wants_tool(names):
            # `cat` blocks on the FIFO until SlowTool writes: a real run inside a real tool
            # (read_file refuses FIFOs, rightly; the terminal's own process may block)
            return tool_calls(("terminal", {"command": f"cat {self.tool_path}"}), delay=delay)
        return text(f"ack {names}".strip(), delay=delay)

    def _wants_tool(self, names: str) -> bool:
        return zlib.crc32(names.encode()) % 100 < self.tool_share * 100


def open_tokens(messages: list[dict[str, Any]]) -> list[str]:
    """The message numbers the user wrote since the last real answer: an interrupted turn stays
    in the history unanswered, and the next answer covers it (as a model reading it would)."""
    tokens: list[str] = []
    for msg in messages:
        content = msg.get("content")
        if msg.get("role") == "user":
            tokens += [f"#c{c}-m{n}" for c, n in TOKEN_RE.findall(str(content or ""))]
        elif (
            msg.get("role") == "assistant"
            and content
            and not msg.get("tool_calls")
            and not str(content).rstrip().endswith("[interrupted]")
        ):
            tokens = []
    return list(dict.fromkeys(tokens))


class SlowTool:
    """A FIFO in the workspace: `cat` on it (through the terminal tool) blocks until this thread
    writes, which it does after a random hold, so a run spends real time inside a tool. `busy`
    is set meanwhile."""

    def __init__(self, workspace: Path, hold: tuple[float, float] = (0.05, 0.3), seed: int = 0):
        workspace.mkdir(parents=True, exist_ok=True)
        self.path = workspace / "slow.fifo"
        if not self.path.exists():
            os.mkfifo(self.path)
        self.hold = hold
        self.busy = threading.Event()
        self.calls = 0
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-tool", daemon=True)

    def start(self) -> SlowTool:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            fd = os.open(self.path, os.O_WRONLY)  # blocks until a reader (the tool) opens it
            try:
                if self._stop.is_set():
                    return
                self.calls += 1
                self.busy.set()
                time.sleep(self._rng.uniform(*self.hold))
                with contextlib.suppress(BrokenPipeError):  # the gateway died meanwhile
                    os.write(fd, b"slow tool output\n")
            finally:
                os.close(fd)
                self.busy.clear()

    def stop(self) -> None:
        self._stop.set()
        # a writer waiting in open() goes on once any reader shows up
        reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            self._thread.join(5)
        finally:
            os.close(reader)


@dataclass
class Sent:
    token: str
    chat: int
    message_id: int
    at: float


@dataclass
class Tally:
    """What the users saw: every numbered message against the bot messages answering it."""

    sent: int = 0
    accepted: int = 0  # in the gateway's inbox
    once: int = 0
    twice: int = 0
    never: int = 0
    error_replies: int = 0  # answered, but with an apology instead of the answer
    misrouted: int = 0  # an answer that went to another chat
    doubled: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "accepted": self.accepted,
            "answered_once": self.once,
            "answered_twice": self.twice,
            "never_answered": self.never,
            "error_replies": self.error_replies,
            "misrouted": self.misrouted,
        }


def tokens_in(msg: dict[str, Any]) -> set[str]:
    """The message numbers a bot message names."""
    return {f"#c{c}-m{n}" for c, n in TOKEN_RE.findall(str(msg.get("text") or ""))}


def tally(sent: list[Sent], bot_messages: list[dict[str, Any]]) -> Tally:
    """A bot message answers a user message if it names its number or quotes it."""
    by_token = {s.token: s for s in sent}
    by_message = {(s.chat, s.message_id): s.token for s in sent}
    answers: dict[str, set[int]] = defaultdict(set)
    apologies: set[str] = set()
    result = Tally(sent=len(sent))
    for i, msg in enumerate(bot_messages):
        named = tokens_in(msg)
        for token in named:
            if token in by_token:
                answers[token].add(i)
                if by_token[token].chat != msg.get("chat_id"):
                    result.misrouted += 1
        quoted = (msg.get("reply_parameters") or {}).get("message_id")
        token = by_message.get((msg.get("chat_id"), quoted))  # type: ignore[arg-type]
        if token is not None and token not in named:
            answers[token].add(i)
            apologies.add(token)
    for s in sent:
        count = len(answers[s.token])
        if count == 0:
            result.never += 1
            result.lost.append(s.token)
        elif count == 1:
            result.once += 1
        else:
            result.twice += 1
            result.doubled.append(s.token)
    result.error_replies = len(apologies)
    return result


class Driver:
    """Numbered messages from several chats through the fake Telegram: a chat sends its next
    message once its last one was answered (or after ``patience`` seconds without an answer)."""

    def __init__(
        self,
        tg: FakeTelegram,
        chats: list[int],
        *,
        patience: float = 60.0,
        pause: tuple[float, float] = (0.0, 0.1),
        seed: int = 0,
        rate: float | None = None,
    ) -> None:
        self.tg = tg
        self.chats = chats
        self.patience = patience
        self.pause = pause
        self.rate = rate  # messages per second overall; None: as fast as answers allow
        self.sent: list[Sent] = []
        self.injected = threading.Event()  # set after each message, for kill triggers
        self.latencies: list[float] = []  # seconds from a message to its first answer
        self._rng = random.Random(seed)
        self._last: dict[int, Sent] = {}
        self._next_at: dict[int, float] = {}
        self._counters = dict.fromkeys(chats, 0)
        self._answered: set[str] = set()
        self._seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-driver", daemon=True)

    def start(self) -> Driver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def unanswered(self) -> list[Sent]:
        self._scan()
        return [s for s in self.sent if s.token not in self._answered]

    def _scan(self) -> None:
        sent = self.tg.sent
        now = time.monotonic()
        by_token = {s.token: s for s in self.sent[-500:]}
        for msg in sent[self._seen :]:
            for token in tokens_in(msg):
                if token not in self._answered:
                    self._answered.add(token)
                    if token in by_token:
                        self.latencies.append(now - by_token[token].at)
        self._seen = len(sent)

    def _run(self) -> None:
        interval = 1.0 / self.rate if self.rate else 0.0
        next_send = time.monotonic()
        while not self._stop.is_set():
            self._scan()
            now = time.monotonic()
            for chat in self.chats:
                if self._stop.is_set() or (interval and now < next_send):
                    break
                if self._ready(chat, now):
                    self._send(chat)
                    next_send = max(next_send + interval, now) if interval else now
            time.sleep(0.003)

    def _ready(self, chat: int, now: float) -> bool:
        if now < self._next_at.get(chat, 0.0):
            return False
        last = self._last.get(chat)
        return last is None or last.token in self._answered or now - last.at > self.patience

    def _send(self, chat: int) -> None:
        self._counters[chat] += 1
        token = f"#c{chat}-m{self._counters[chat]}"
        update = self.tg.send_text(chat, f"{token} please answer")
        sent = Sent(token, chat, int(update["message"]["message_id"]), time.monotonic())
        self.sent.append(sent)
        self._last[chat] = sent
        self._next_at[chat] = sent.at + self._rng.uniform(*self.pause)
        self.injected.set()


def inbox_count(home: Path, status: str | None = None) -> int:
    """Telegram messages (not commands) in a stopped daemon's inbox: what it accepted (in
    ``status``, if given)."""
    query = (
        "SELECT count(*) FROM inbox WHERE platform = 'telegram' "
        "AND json_extract(payload, '$.text') NOT LIKE '/%' AND status = coalesce(?, status)"
    )
    with contextlib.closing(sqlite3.connect(home / "state.db")) as db:
        return int(db.execute(query, (status,)).fetchone()[0])


def sigkill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
