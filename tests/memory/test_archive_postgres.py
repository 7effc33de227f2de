"""The archive's tests (test_archive.py) on PostgreSQL: its full-text search for keywords, the
brute-force vector scan, and session_search per user in a session several users share."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.store.store import Store
from tests.integration.test_postgres import SERVER
from tests.integration.test_postgres import pg_url as pg_url  # fixture
from tests.memory import test_archive as on_sqlite

# the same tests, collected here again with this module's `store_section`
test_retain_recall_by_meaning_and_reflect = on_sqlite.test_retain_recall_by_meaning_and_reflect
test_keyword_fallback_while_embeddings_are_down = (
    on_sqlite.test_keyword_fallback_while_embeddings_are_down
)
test_extract_stores_each_fact = on_sqlite.test_extract_stores_each_fact
test_recall_is_trimmed_to_the_token_budget = on_sqlite.test_recall_is_trimmed_to_the_token_budget
test_auto_retain_keeps_each_turn_in_the_users_bank = (
    on_sqlite.test_auto_retain_keeps_each_turn_in_the_users_bank
)

pytestmark = pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)")


@pytest.fixture
def store_section(pg_url: str) -> dict[str, Any]:
    return {"url": pg_url}


async def test_session_search_per_user_on_postgres(pg_url: str) -> None:
    store = Store(pg_url)
    await store.open()
    try:
        key = "telegram:thread:-100:7"
        await store.complete_turn(
            key, [{"role": "user", "content": "my PIN is 4321"}], [], "", "r1", user_id="1"
        )
        await store.complete_turn(
            key, [{"role": "user", "content": "the PIN of the door"}], [], "", "r2", user_id="2"
        )
        mine = await store.search_messages(key, "PIN", 10, user_id="2")
        everyone = await store.search_messages(key, "PIN", 10)
    finally:
        await store.close()
    assert [h.snippet for h in mine] == ["the [PIN] of the door"]
    assert len(everyone) == 2
