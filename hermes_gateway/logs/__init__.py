"""Structured logging: structlog events rendered as JSON lines to a rotating file and to stderr.

Formatting and disk writes happen on a listener thread (a `QueueHandler` on the caller's side),
so the event loop never blocks on a log write; a redactor removes every secret from every line.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import logging.handlers
import os
import queue
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import structlog

from hermes_gateway.config import Config
from hermes_gateway.logs.bounds import ForeignRecordLimiter, cap_fields, capped, cut_foreign
from hermes_gateway.platform_spec import platform_specs
from hermes_gateway.traces import trace_ids

# what is shaped like a credential whatever the platform; each platform adds its own
# (`PlatformSpec.token_patterns`: a Telegram bot token, Slack's xoxb-/xapp-, Discord's)
_GENERIC_TOKENS = (
    r"\bsk-[A-Za-z0-9_-]{16,}",  # OpenAI-style API key
    r"(?<=Bearer )[A-Za-z0-9._~+/=-]{8,}",
)
# Discord interaction and webhook tokens travel in URLs and in gateway payloads, and discord.py
# logs both at debug: the part after the prefix (a URL path; a "token" key, quoted as in a repr
# or JSON, escaped at any depth: an inbox row's payload inside a logged SQL call) is the secret
_PREFIXED_TOKENS = re.compile(
    r"(/(?:webhooks|interactions)/\d+/)[A-Za-z0-9._~-]{16,}"
    # the opening quote's backslashes are read from the first of a run only: from every one of
    # them, each start would rescan the whole run (quadratic on a body of backslashes)
    r"""|((?:'|(?<!\\)\\*")token(?:'|\\*")\s*:\s*(?:'|\\*"))[^'"\\]{8,}"""
)


# what every match of `_PREFIXED_TOKENS` contains: a line with none of them is left alone
_PREFIXED_MARKERS = ("/webhooks/", "/interactions/", "token")
_LITERAL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:/= ")


class Redactor:
    """Replaces known secrets and anything shaped like a token with ``***``: the generic
    shapes and ``patterns`` (by default every installed platform's `token_patterns`).

    Every line logged is searched, so the shapes are tried only where they can match: a shape
    that must contain a literal (``sk-``, ``xoxb-``, what follows ``Bearer``) is left out of
    the search of a line without it. One alternation of the shapes that remain matches as the
    alternation of all of them would, since a left-out one matches nowhere in that line."""

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] | None = None) -> None:
        if patterns is None:
            patterns = [p for spec in platform_specs() for p in spec.token_patterns]
        self._patterns = (*_GENERIC_TOKENS, *patterns)
        self._markers = [literal_of(p) for p in self._patterns]
        self._searches: dict[tuple[int, ...], re.Pattern[str] | None] = {}
        # each secret also as it appears inside a JSON string (quotes, backslashes, non-ASCII
        # escaped); longest first, so a secret that contains another is removed whole
        forms = set()
        for secret in secrets:
            if secret:
                forms.add(secret)
                forms.add(json.dumps(secret)[1:-1])
                forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        self._secrets = sorted(forms, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        if any(m in text for m in _PREFIXED_MARKERS):
            text = _PREFIXED_TOKENS.sub(lambda m: f"{m[1] or m[2]}***", text)
        search = self._search(text)
        return text if search is None else search.sub("***", text)

    def _search(self, text: str) -> re.Pattern[str] | None:
        """The alternation, in their order, of the shapes that may match in ``text``."""
        live = tuple(i for i, m in enumerate(self._markers) if m is None or m in text)
        if live not in self._searches:  # a few combinations ever: most lines have no literal
            joined = "|".join(self._patterns[i] for i in live)
            self._searches[live] = re.compile(joined) if live else None
        return self._searches[live]


def literal_of(pattern: str) -> str | None:
    """A literal that every match of ``pattern`` contains, when it can be read off its start
    plainly (after a ``\\b``, or a lookbehind of plain characters): None when unsure (an
    alternation, a flag that changes what a literal matches, an escape or a class first)."""
    if "|" in pattern or re.compile(pattern).flags & (re.IGNORECASE | re.VERBOSE):
        return None
    rest = pattern.removeprefix(r"\b")
    if rest.startswith("(?<="):
        ahead, close, _ = rest[4:].partition(")")
        return ahead if close and len(ahead) >= 2 and set(ahead) <= _LITERAL else None
    run = ""
    for char in rest:
        if char not in _LITERAL:
            break
        run += char
    if run != rest and rest[len(run)] in "?*+{":  # the last one may be absent or repeated
        run = run[:-1]
    return run if len(run) >= 2 else None


class _RedactingFormatter(structlog.stdlib.ProcessorFormatter):
    """Renders and redacts a record once, however many times it is asked: stderr and the file
    share this formatter, and the file's rotation check formats the record again to measure
    it. The listener thread hands one record at a time to every handler, so the last record's
    text is the only one worth keeping."""

    def __init__(self, redactor: Redactor, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._redact = redactor
        self._last: tuple[logging.LogRecord, str] | None = None

    def format(self, record: logging.LogRecord) -> str:
        last = self._last
        if last is not None and last[0] is record:
            return last[1]
        text = self._redact(super().format(record))
        self._last = (record, text)
        return text


class _RotatingFile(logging.handlers.RotatingFileHandler):
    """The standard size-rotated file, with its size counted as lines are written. The base
    class checks for every line that the path is a regular file and seeks to the file's end
    (two stat calls and a flush per line); the path is our own file, measured when opened.
    An empty file is never rotated, whatever the size of the line that comes."""

    _size = 0

    def _open(self) -> io.TextIOWrapper:
        stream = super()._open()
        self._size = os.fstat(stream.fileno()).st_size
        return stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = len(self.format(record).encode()) + len(self.terminator)
            if self.stream is None:  # a rollover that failed left it closed
                self.stream = self._open()
            full = self._size > 0 and self._size + line >= self.maxBytes
            if full and self.maxBytes > 0 and self.backupCount > 0:
                self.doRollover()
            logging.FileHandler.emit(self, record)
            self._size += line
        except Exception:
            self.handleError(record)


class _CallerQueueHandler(logging.handlers.QueueHandler):
    """Hands records to the listener thread unformatted, with the caller's bound context; a
    third-party record is cut first (cheap slicing), so the queue never holds a whole body."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        cut_foreign(record)
        # contextvars live on the calling thread: capture them before the thread hop
        ctx = structlog.contextvars.get_contextvars()
        if ctx:
            record.hermes_ctx = ctx
        return record


def _record_time(
    logger: Any, method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """Stamp a stdlib record with the time it was logged, not the time it was formatted."""
    record = event_dict.get("_record")
    if record is not None and "timestamp" not in event_dict:
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        event_dict["timestamp"] = stamp.isoformat().replace("+00:00", "Z")
    return event_dict


def _merge_record_context(
    logger: Any, method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    record = event_dict.get("_record")
    ctx = getattr(record, "hermes_ctx", None)
    if ctx:
        for key, value in ctx.items():
            event_dict.setdefault(key, value)
    for attr, key in (("hermes_error", "error"), ("hermes_suppressed", "suppressed_similar")):
        value = getattr(record, attr, None)
        if value is not None:
            event_dict[key] = value
    return event_dict


class LogSink:
    """The running log pipeline; `stop()` flushes and joins the writer thread."""

    def __init__(
        self,
        listener: logging.handlers.QueueListener,
        path: Path | None,
        limiter: ForeignRecordLimiter,
    ) -> None:
        self._listener = listener
        self._limiter = limiter
        self.path = path

    def stop(self) -> None:
        # what the rate limit held back and no later record reported
        for record in self._limiter.summaries():
            self._listener.queue.put_nowait(record)
        self._listener.stop()


def configure_logging(config: Config, stream: TextIO | None = None) -> LogSink:
    """Route structlog and stdlib logging through the redactor to the file and to stderr."""
    stream = stream or sys.stderr
    handlers, path = _handlers(config, stream)
    log_queue: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(log_queue, *handlers, respect_handler_level=False)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    limiter = ForeignRecordLimiter()
    queue_handler = _CallerQueueHandler(log_queue)
    queue_handler.addFilter(limiter)
    root.addHandler(queue_handler)
    root.setLevel(config.logging.level.upper())
    # per-request INFO lines from the HTTP stacks would drown the gateway's own events
    for noisy in ("httpx", "httpcore", "aiohttp.access", "hpack", "websockets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # aiosqlite logs every call at debug with its SQL parameters: the users' texts
    logging.getLogger("aiosqlite").setLevel(logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            trace_ids,  # read on the caller's thread, where its span is current
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # render tracebacks here: on the listener thread the exception is gone
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,  # capture_logs in tests must see every logger
    )
    listener.start()
    return LogSink(listener, path, limiter)


def _handlers(config: Config, stream: TextIO) -> tuple[list[logging.Handler], Path | None]:
    """stderr (console or JSON lines) and the rotating JSON file, if any, with its path."""
    redactor = Redactor(config.secrets())
    json_formatter = _formatter(
        redactor,
        structlog.processors.format_exc_info,
        capped(structlog.processors.JSONRenderer(default=str, ensure_ascii=False)),
    )
    use_console = config.logging.format == "console" or (
        config.logging.format == "auto" and stream.isatty()
    )
    stderr_handler = logging.StreamHandler(stream)
    stderr_handler.setFormatter(
        _formatter(redactor, capped(structlog.dev.ConsoleRenderer(colors=stream.isatty())))
        if use_console
        else json_formatter
    )
    if not config.logging.file:
        return [stderr_handler], None
    path = config.home_path / "logs" / "gateway.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    file_handler = _RotatingFile(
        path,
        maxBytes=config.logging.max_bytes,
        backupCount=config.logging.backups,
        encoding="utf-8",
    )
    file_handler.setFormatter(json_formatter)
    return [stderr_handler, file_handler], path


def _formatter(redactor: Redactor, *render: Any) -> _RedactingFormatter:
    """``render`` (a renderer, after any processor it needs first) behind the shared steps."""
    *first, renderer = render
    return _RedactingFormatter(
        redactor,
        processors=[
            *first,
            cap_fields,
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            renderer,
        ],
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            _record_time,
            _merge_record_context,
        ],
    )
