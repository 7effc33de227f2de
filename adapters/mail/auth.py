"""Who sent a mail, as far as the receiving server can vouch for it: the one From address,
and whether the trusted server's `Authentication-Results` (RFC 8601) say that DKIM, SPF or
DMARC passed for its domain. A From header alone proves nothing; see docs/platforms.md."""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.headerregistry import HeaderRegistry
from email.message import Message
from email.utils import getaddresses

_REGISTRY = HeaderRegistry()
_ADDR = re.compile(r"^[^@\s<>()\[\]\\,;:\"]+@[A-Za-z0-9.-]+$")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of a check: ``ok``, or why not (a short reason for the log)."""

    ok: bool
    why: str = ""


def fold(address: str) -> str:
    """An address as allow lists compare it: lower case (local parts are case-insensitive on
    every mail server the gateway is meant for)."""
    return address.strip().lower()


def domain_of(address: str) -> str:
    return fold(address).rpartition("@")[2].rstrip(".")


def sender(message: Message) -> str | None:
    """The one address in the one From header, folded; None when there is not exactly one,
    or when two readings of the header disagree (a parser confusion is a forging attempt)."""
    values = message.get_all("From") or []
    if len(values) != 1:
        return None
    raw = str(values[0])
    if "=?" in _address_text(raw):
        return None  # an encoded word may only be a display name, never the address
    pairs = [(name, addr) for name, addr in getaddresses([raw]) if name or addr]
    if len(pairs) != 1 or not pairs[0][1].isascii() or not _ADDR.match(pairs[0][1]):
        return None  # internationalized (SMTPUTF8) addresses are not taken: see docs
    try:
        parsed = _REGISTRY("from", raw)
        addresses = parsed.addresses  # type: ignore[attr-defined]
    except (ValueError, TypeError, IndexError):
        return None
    if len(addresses) != 1 or fold(addresses[0].addr_spec) != fold(pairs[0][1]):
        return None
    return fold(pairs[0][1])


def _address_text(raw: str) -> str:
    """The part of a From value that is the address: inside its angle brackets, else what is
    left without quoted strings and comments."""
    unquoted = _QUOTED.sub('""', raw)
    if "<" in unquoted:
        return unquoted.rpartition("<")[2].partition(">")[0]
    return _strip_comments(unquoted)


def authenticated(message: Message, address: str, trusted: tuple[str, ...]) -> Verdict:
    """Whether the topmost Authentication-Results header, written by a trusted authserv-id,
    says DKIM, SPF or DMARC passed for a domain aligned with ``address``'s.

    Only the topmost header counts: the receiving server adds its own above every header the
    message came with, so any other one may have been written by the sender."""
    headers = message.get_all("Authentication-Results") or []
    if not headers:
        return Verdict(False, "no Authentication-Results header")
    authserv, results = parse_results(str(headers[0]))
    if authserv not in trusted:
        return Verdict(False, f"topmost Authentication-Results from untrusted {authserv!r}")
    domain = domain_of(address)
    for method, result, props in results:
        if result != "pass":
            continue
        if aligned(domain, _vouched(method, props)):
            return Verdict(True, f"{method}=pass")
    return Verdict(False, f"no aligned dkim/spf/dmarc pass for {domain}")


def _vouched(method: str, props: dict[str, str]) -> str:
    """The domain a passing result vouches for: DKIM's signing domain, SPF's envelope sender
    domain, DMARC's From domain; "" for any other method."""
    if method == "dkim":
        return props.get("header.d") or props.get("header.i", "").rpartition("@")[2]
    if method == "spf":
        vouched = props.get("smtp.mailfrom", "")
        return vouched.rpartition("@")[2] if vouched else ""
    if method == "dmarc":
        return props.get("header.from", "")
    return ""


def aligned(from_domain: str, vouched: str) -> bool:
    """DMARC's relaxed alignment without a public suffix list: the same domain, or one a
    subdomain of the other, and never a bare top-level name."""
    vouched = vouched.strip().lower().rstrip(".")
    if not from_domain or "." not in vouched:
        return False
    return (
        from_domain == vouched
        or from_domain.endswith("." + vouched)
        or vouched.endswith("." + from_domain)
    )


Result = tuple[str, str, dict[str, str]]  # (method, result, {ptype.property: value})


def parse_results(value: str) -> tuple[str, list[Result]]:
    """An Authentication-Results value: its authserv-id (folded) and each method's result."""
    segments = _split(_strip_comments(value.replace("\r", " ").replace("\n", " ")))
    head = segments[0].split() if segments else []
    authserv = head[0].lower() if head else ""
    results: list[Result] = []
    for segment in segments[1:]:
        tokens = segment.split()
        if not tokens or "=" not in tokens[0]:
            continue
        method, _, result = tokens[0].partition("=")
        props = {}
        for token in tokens[1:]:
            key, eq, val = token.partition("=")
            if eq:
                props[key.lower()] = val.strip('"').lower()
        results.append((method.split("/")[0].lower(), result.lower(), props))
    return authserv, results


def _strip_comments(value: str) -> str:
    """The value without its (nested) comments, quoted strings kept."""
    out: list[str] = []
    depth, quoted = 0, False
    for i, ch in enumerate(value):
        if ch == '"' and depth == 0 and (i == 0 or value[i - 1] != "\\"):
            quoted = not quoted
        if not quoted and ch == "(":
            depth += 1
            continue
        if not quoted and ch == ")" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    return "".join(out)


def _split(value: str) -> list[str]:
    """Split on the semicolons outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for ch in value:
        if ch == '"':
            quoted = not quoted
        if ch == ";" and not quoted:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]
