"""python-telegram-bot internals the Telegram adapter reads, in one place.

`RetryAfter.retry_after` is mid-migration in PTB 22 (int seconds -> `timedelta`): reading the
property emits a deprecation warning on every flood-control answer. The `_retry_after` field
behind it is already the `timedelta`; read it, and fall back to the public property if a
release drops the field (tests/test_shims.py fails loudly when that happens).
"""

from __future__ import annotations

import datetime
import warnings

from telegram.error import RetryAfter
from telegram.warnings import PTBDeprecationWarning


def retry_after_s(exc: RetryAfter) -> float:
    """Seconds Telegram asked us to wait, without PTB's deprecation warning."""
    field = getattr(exc, "_retry_after", None)
    if isinstance(field, datetime.timedelta):
        return field.total_seconds()
    with warnings.catch_warnings():  # the field is gone: the public property
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return float(value)
