"""`session_search` and compaction markers on PostgreSQL (full-text search by its GIN index)."""

from __future__ import annotations

import pytest

from agent_core.context import SUMMARY_PREFIX, Compaction
from agent_core.history import History
from hermes_gateway.store.store import Store
from tests.integration.test_postgres import SERVER, event
from tests.integration.test_postgres import pg_url as pg_url  # fixture

pytestmark = pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)")


async def test_search_and_compaction_on_postgres(pg_url: str) -> None:
    store = Store(pg_url)
    await store.open()
    try:
        key = event(1).session_key
        other = event(1, chat="c2").session_key
        old = [
            {"role": "user", "content": "The backup runs at 03:00 on Sundays"},
            {"role": "assistant", "content": "Noted: backups on Sundays."},
        ]
        await store.complete_turn(key, old, [], "", "r1")
        await store.complete_turn(
            other, [{"role": "user", "content": "backup bucket"}], [], "", "r"
        )
        await store.reset_session(key)
        await store.complete_turn(key, [{"role": "user", "content": "hello"}], [], "", "r2")
        hits = await store.search_messages(key, "sundays BACKUP", 10)
        assert sorted((h.role, h.current) for h in hits) == [("assistant", False), ("user", False)]
        user_hit = next(h for h in hits if h.role == "user")
        assert "[Sundays]" in user_hit.snippet and "[backup]" in user_hit.snippet.lower()
        assert await store.search_messages(key, "backup zebra", 10) != []  # any word, then
        assert await store.search_messages(key, "bucket", 10) == []  # c2's session is not ours
        assert await store.search_messages(key, "&|!", 10) == []
        summary = {"role": "user", "content": SUMMARY_PREFIX + "they talked"}
        compaction = Compaction(History([summary]), summarized=1)
        await store.complete_turn(
            key, [compaction.marker, {"role": "user", "content": "x"}], [], "", "r3"
        )
        assert await store.history(key) == [summary, {"role": "user", "content": "x"}]
    finally:
        await store.close()
