"""Bounds on what one log record may cost: records from other libraries are cut and rate-limited
where they are logged, and every field and whole line is capped on the writer thread before the
redactor sees it, so neither a stranger's request body nor a flood can slow or swamp the logs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import structlog
from aiohttp.http_exceptions import HttpProcessingError

# a third-party record (a library echoing a request line or body) keeps a few hundred characters
FOREIGN_FIELD_CHARS = 400
# one of our own fields, and a traceback (whose end is kept: that is where the error is)
FIELD_CHARS = 4096
TRACEBACK_CHARS = 8192
LINE_CHARS = 16384
# third-party records at INFO and above: per logger and message, then per logger
KEY_BURST, KEY_PER_S = 10, 1.0
LOGGER_BURST, LOGGER_PER_S = 50, 5.0
_MAX_KEYS = 1024
_KEY_CHARS = 40  # bolt logs f-strings: the start of the text stands for its template
# a cut never leaves the first half of a token behind: it backs off to one of these
_SEPARATORS = frozenset(" \t\r\n,;'\"()[]{}<>|`")
_BACKOFF = 160
_TRACEBACKS = frozenset({"exception", "stack"})  # the watchdog's stuck-loop stack too


def truncate(text: str, limit: int, *, keep_end: bool = False) -> str:
    """`text` cut to about `limit` characters, with a marker saying how many were cut."""
    if len(text) <= limit:
        return text
    if keep_end:
        tail = text[len(text) - limit :]
        start = next((i for i, c in enumerate(tail[:_BACKOFF]) if c in _SEPARATORS), _BACKOFF)
        kept = tail[start:]
        return f"…[{len(text) - len(kept)} chars cut]{kept}"
    head = text[:limit]
    window = head[-_BACKOFF:]
    back = next((i for i, c in enumerate(reversed(window)) if c in _SEPARATORS), len(window))
    kept = head[: len(head) - back]
    return f"{kept}…[{len(text) - len(kept)} chars cut]"


class _Bucket:
    __slots__ = ("stamp", "suppressed", "tokens")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens, self.stamp, self.suppressed = burst, now, 0

    def take(self, burst: float, per_s: float, now: float) -> bool:
        self.tokens = min(burst, self.tokens + (now - self.stamp) * per_s)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.suppressed += 1
        return False


class ForeignRecordLimiter(logging.Filter):
    """Rate-limits third-party records at INFO and above (runs on the caller's thread: cheap).

    A record let through after some were dropped carries `suppressed_similar`; `summaries()`
    gives the counts still pending, for the sink to write when it stops."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._keys: dict[tuple[str, str], _Bucket] = {}
        self._loggers: dict[str, _Bucket] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # ours come through structlog (the message is its event dict); a library's is a string,
        # also when it logs under one of our names (slack-bolt does, as we hand it a logger)
        if record.levelno < logging.INFO or not isinstance(record.msg, str):
            return True
        if getattr(record, "hermes_summary", False):
            return True
        key = (record.name, record.msg[:_KEY_CHARS])
        now = time.monotonic()
        with self._lock:
            bucket = self._keys.get(key)
            if bucket is None:
                if len(self._keys) >= _MAX_KEYS:
                    del self._keys[next(iter(self._keys))]
                bucket = self._keys[key] = _Bucket(KEY_BURST, now)
            per_logger = self._loggers.setdefault(record.name, _Bucket(LOGGER_BURST, now))
            if not bucket.take(KEY_BURST, KEY_PER_S, now):
                return False
            if not per_logger.take(LOGGER_BURST, LOGGER_PER_S, now):
                bucket.suppressed += 1
                return False
            if bucket.suppressed:
                record.hermes_suppressed = bucket.suppressed
                bucket.suppressed = 0
        return True

    def summaries(self) -> list[logging.LogRecord]:
        with self._lock:
            pending = [(key, b.suppressed) for key, b in self._keys.items() if b.suppressed]
            for key, _ in pending:
                self._keys[key].suppressed = 0
        records = []
        for (name, msg), count in pending:
            record = logging.makeLogRecord(
                {"name": name, "levelno": logging.WARNING, "levelname": "WARNING",
                 "msg": "suppressed %d similar: %s", "args": (count, msg),
                 "hermes_suppressed": count, "hermes_summary": True}
            )  # fmt: skip
            records.append(record)
        return records


def cut_foreign(record: logging.LogRecord) -> None:
    """Shrink a third-party record before it is queued: its long text arguments (a request body,
    a header line) cut, and a peer's malformed request reduced to one line without traceback."""
    if not isinstance(record.msg, str):  # one of ours, from structlog
        return
    if isinstance(record.args, tuple) and record.args:
        record.args = tuple(_cut_arg(arg) for arg in record.args)
    elif not record.args and len(record.msg) > FOREIGN_FIELD_CHARS:
        record.msg = truncate(record.msg, FOREIGN_FIELD_CHARS)
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, HttpProcessingError):
        # the client's fault, not ours: no traceback, and not an ERROR
        text = exc.message if isinstance(exc.message, str) else ""
        record.hermes_error = truncate(f"{type(exc).__name__}: {text}", FOREIGN_FIELD_CHARS)
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"


def _cut_arg(arg: object) -> object:
    if isinstance(arg, str) and len(arg) > FOREIGN_FIELD_CHARS:
        return truncate(arg, FOREIGN_FIELD_CHARS)
    if isinstance(arg, (bytes, bytearray)) and len(arg) > FOREIGN_FIELD_CHARS:
        return truncate(repr(bytes(arg[: FOREIGN_FIELD_CHARS + _BACKOFF])), FOREIGN_FIELD_CHARS)
    return arg


def cap_fields(
    logger: Any, method: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """Every field of a line within its cap (on the writer thread, before rendering; runs before
    `remove_processors_meta`, which drops the `_from_structlog` it reads)."""
    limit = FIELD_CHARS if event_dict.get("_from_structlog") else FOREIGN_FIELD_CHARS
    for key, value in event_dict.items():
        if key.startswith("_"):
            continue
        if key in _TRACEBACKS and isinstance(value, str):
            event_dict[key] = truncate(value, TRACEBACK_CHARS, keep_end=True)
        elif isinstance(value, str):
            event_dict[key] = truncate(value, limit)
        elif isinstance(value, (dict, list, tuple, set)) or not _is_scalar(value):
            text = _dumps(value)
            if len(text) > limit:
                event_dict[key] = truncate(text, limit)
    return event_dict


def capped(render: Any) -> Any:
    """`render` (the last processor), its line replaced by a short one if over `LINE_CHARS`."""

    def processor(logger: Any, method: str, event_dict: structlog.typing.EventDict) -> str:
        keep = {k: event_dict[k] for k in ("timestamp", "level", "logger") if k in event_dict}
        event = str(event_dict.get("event", ""))
        line: str = render(logger, method, event_dict)
        if len(line) <= LINE_CHARS:
            return line
        keep.update(event=truncate(event, FIELD_CHARS), line_cut=len(line))
        short: str = render(logger, method, keep)
        return short

    return processor


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float))


def _dumps(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)
