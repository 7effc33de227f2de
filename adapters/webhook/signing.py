"""A route's signature schemes, checked on the raw body before any of it is parsed.

``hermes``: ``X-Hermes-Signature: t=<unix seconds>,v1=<hex>``, the hex being
HMAC-SHA256(secret, ``<t>.<delivery id>.<body>``), and ``X-Hermes-Delivery: <id>``; the
timestamp must be within the route's window, and the id is signed, so a replay cannot take a
new one. ``github``: ``X-Hub-Signature-256: sha256=<hex>`` over the body, ``X-GitHub-Delivery``
the id (GitHub signs neither a time nor the id). Comparisons are constant-time."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

_DELIVERY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class Signed:
    """What a verified request says besides its body: its delivery id and event name."""

    delivery: str
    event: str


class Unsigned(Exception):
    """The request is not signed with the route's secret; the message says why (never the
    secret, the signature or the body)."""


def digest(secret: str, data: bytes) -> str:
    return hmac.new(secret.encode(), data, hashlib.sha256).hexdigest()


def hermes_header(secret: str, stamp: int, delivery: str, body: bytes) -> str:
    """The ``X-Hermes-Signature`` value for ``body`` (callbacks are signed this way too)."""
    base = f"{stamp}.{delivery}.".encode() + body
    return f"t={stamp},v1={digest(secret, base)}"


def verify(
    scheme: str, headers: Mapping[str, str], body: bytes, secret: str, now: float, skew_s: int
) -> Signed:
    """The request's `Signed`, or `Unsigned` naming why not."""
    if scheme == "github":
        return _github(headers, body, secret)
    return _hermes(headers, body, secret, now, skew_s)


def _hermes(
    headers: Mapping[str, str], body: bytes, secret: str, now: float, skew_s: int
) -> Signed:
    delivery = _delivery(headers.get("X-Hermes-Delivery", ""))
    fields = dict(
        part.strip().partition("=")[::2]
        for part in headers.get("X-Hermes-Signature", "").split(",")
    )
    stamp, given = fields.get("t", ""), fields.get("v1", "")
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
        raise Unsigned("missing or malformed timestamp")
    if not _HEX.match(given):
        raise Unsigned("missing or malformed signature")
    wanted = digest(secret, f"{stamp}.{delivery}.".encode() + body)
    if not hmac.compare_digest(given, wanted):
        raise Unsigned("bad signature")
    # after the signature: a stale stamp is only worth telling a sender who holds the secret
    if abs(now - int(stamp)) > skew_s:
        raise Unsigned("stale timestamp")
    return Signed(delivery, headers.get("X-Hermes-Event", "") or "webhook")


def _github(headers: Mapping[str, str], body: bytes, secret: str) -> Signed:
    delivery = _delivery(headers.get("X-GitHub-Delivery", ""))
    given = headers.get("X-Hub-Signature-256", "")
    scheme, _, hexdigest = given.partition("=")
    if scheme != "sha256" or not _HEX.match(hexdigest):
        raise Unsigned("missing or malformed X-Hub-Signature-256")
    if not hmac.compare_digest(hexdigest, digest(secret, body)):
        raise Unsigned("bad signature")
    return Signed(delivery, headers.get("X-GitHub-Event", "") or "webhook")


def _delivery(value: str) -> str:
    if not _DELIVERY.match(value):
        raise Unsigned("missing or malformed delivery id (1-128 of A-Z a-z 0-9 . _ : -)")
    return value
