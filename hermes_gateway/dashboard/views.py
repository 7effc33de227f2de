"""What each dashboard page shows, as JSON-ready data read from the running gateway's parts
(the same readers `/status` uses). Fields are picked one by one: nothing secret (tokens, a
message's reply context) can reach a page by accident."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from hermes_gateway.errors import StoreError

if TYPE_CHECKING:
    from hermes_gateway.dashboard.app import DashboardParts
    from hermes_gateway.dashboard.series import TimeSeries

PREVIEW_CHARS = 200
HISTORY_SHOWN = 30
INBOX_SHOWN = 50  # entries per Inbox list, the most recently changed
WAITING_AFTER_S = 10.0
SESSIONS_SHOWN = 200  # rows of the Sessions page; the counts above it are of every session


def overview(gateway: DashboardParts, series: TimeSeries) -> dict[str, Any]:
    status = gateway.vitals.status()
    store = gateway.store
    return {
        "version": status["version"],
        "uptime_s": status["uptime_s"],
        "ready": status["ready"],
        "reasons": status["reasons"],
        "platforms": status["platforms"],
        "sessions": status["sessions"],
        "pool": status["pool"],
        "loop_lag_ms": status["loop_lag_ms"],
        "model": status["model"],
        "busy_policy": status["busy_policy"],
        "quarantined": len(status["quarantined"]),
        "store": {
            "open": store.is_open,
            "writable": store.circuit.writable,
            "problem": store.problem,
        },
        "latest": series.latest(),
        "mcp": status["mcp"],  # each MCP server's state and tools (none configured: {})
    }


def sessions(gateway: DashboardParts) -> dict[str, Any]:
    """The first `SESSIONS_SHOWN` sessions the runner tracks (the longest tracked first), and
    the counts of them all: each viewer reads this every second, so it is bounded."""
    runner = gateway.runner
    policy = gateway.config.runner.busy_policy
    rows = []
    for key in itertools.islice(runner.session_keys(), SESSIONS_SHOWN):
        view = runner.describe(key)
        messages = runner.current_messages(key)
        first = messages[-1] if messages else None
        rows.append(
            {
                "key": key,
                "state": "idle" if view.state is None else view.state.value,
                "seconds": round(view.seconds, 1),
                "pending": view.pending,
                "policy": policy,
                "platform": first.platform if first else key.split(":", 1)[0],
                "user_id": first.user_id if first else "",
                "user_name": first.user_name if first else "",
                "text": _preview(first.text) if first else "",
                "merged": len(messages),
            }
        )
    rows.sort(key=lambda r: -float(r["seconds"]))
    return {"sessions": rows, "counts": runner.counts(), "shown": len(rows)}


async def history(gateway: DashboardParts, key: str) -> tuple[list[dict[str, str]], str | None]:
    """A session's last messages (role and text), or why they cannot be read."""
    try:
        entries = await gateway.history(key)
    except StoreError as exc:
        return [], f"the store cannot be read: {exc}"
    shown = []
    for entry in entries[-HISTORY_SHOWN:]:
        content = entry.get("content")
        if not isinstance(content, str):
            content = "" if content is None else str(content)
        shown.append({"role": str(entry.get("role", "")), "text": content})
    return shown, None


async def inbox(gateway: DashboardParts) -> dict[str, Any]:
    """Quarantined (this process's list), undeliverable, and waiting: unanswered entries
    (to run, or a reply to send) that no session of this process is working on."""
    out: dict[str, Any] = {
        "quarantined": gateway.inbox.summaries(),
        "undeliverable": [],
        "waiting": [],
        "error": None,
    }
    store = gateway.store
    try:
        out["undeliverable"] = await store.entries(("undeliverable",), limit=INBOX_SHOWN)
        # an entry just accepted is on its way to a run: not waiting yet
        found = await store.entries(
            ("accepted", "done"), limit=INBOX_SHOWN * 4, older_than_s=WAITING_AFTER_S
        )
    except StoreError as exc:
        out["error"] = f"the store cannot be read: {exc}"
        return out
    busy = set(gateway.runner.session_keys())
    out["waiting"] = [e for e in found if e["session_key"] not in busy][:INBOX_SHOWN]
    return out


async def pairing(gateway: DashboardParts) -> dict[str, Any]:
    try:
        entries = await gateway.pairing.entries()
    except StoreError as exc:
        return {"entries": [], "error": f"the store cannot be read: {exc}"}
    keep = ("platform", "user_id", "user_name", "status", "code", "age_s")
    return {"entries": [{k: e[k] for k in keep} for e in entries], "error": None}


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
